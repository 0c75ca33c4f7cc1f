import CPKCS11
import DepotCore
import Foundation

/// A PKCS#11 module, loaded (`dlopen`) and initialised once per process and path, shared by every
/// session on it: the only owner of the library's handle and of its initialisation, finalised and
/// unloaded when the last session on it goes (two token keys of one module in one command must
/// not finalise the library under each other).
final class PKCS11Module {
    let functions: UnsafeMutablePointer<CK_FUNCTION_LIST>
    /// Held around every call that signs: the library was initialised without OS locking, so it
    /// is given one call at a time.
    let lock = NSLock()
    private let library: UnsafeMutableRawPointer
    private let initialised: Bool
    private static let lock = NSLock()
    nonisolated(unsafe) private static var loaded: [String: Weak] = [:]

    private final class Weak {
        weak var module: PKCS11Module?
        init(_ module: PKCS11Module) { self.module = module }
    }

    /// The module at `path`, loaded and initialised once for all its users.
    static func shared(_ path: String) throws(PKCS11Error) -> PKCS11Module {
        lock.lock()
        defer { lock.unlock() }
        if let module = loaded[path]?.module { return module }
        let module = try PKCS11Module(path)
        loaded[path] = Weak(module)
        return module
    }

    private init(_ path: String) throws(PKCS11Error) {
        guard let library = dlopen(path, RTLD_NOW | RTLD_LOCAL) else {
            throw PKCS11Error("the PKCS#11 module \(path) cannot be loaded: \(dlerror().map { String(cString: $0) } ?? "dlopen failed")")
        }
        typealias GetFunctionList = @convention(c) (UnsafeMutablePointer<UnsafeMutablePointer<CK_FUNCTION_LIST>?>?) -> CK_RV
        var list: UnsafeMutablePointer<CK_FUNCTION_LIST>?
        guard let symbol = dlsym(library, "C_GetFunctionList"), unsafeBitCast(symbol, to: GetFunctionList.self)(&list) == CKR_OK, let list else {
            dlclose(library)
            throw PKCS11Error("\(path) is not a PKCS#11 module (no C_GetFunctionList)")
        }
        let started = list.pointee.C_Initialize?(nil) ?? CK_RV(CKR_FUNCTION_NOT_SUPPORTED)
        guard started == CKR_OK || started == CKR_CRYPTOKI_ALREADY_INITIALIZED else {
            dlclose(library)
            throw PKCS11Error("the PKCS#11 module \(path) did not initialise (\(PKCS11Session.name(started)))")
        }
        (self.library, functions, initialised) = (library, list, started == CKR_OK)
    }

    deinit {
        // (Only what this process initialised is finalised.)
        if initialised { _ = functions.pointee.C_Finalize?(nil) }
        dlclose(library)
    }
}

/// One session on the token a URI names, logged in when a PIN is given: the only owner of the
/// session, closed when it goes; it keeps its module loaded meanwhile.
final class PKCS11Session {
    let module: PKCS11Module
    private var functions: UnsafeMutablePointer<CK_FUNCTION_LIST> { module.functions }
    private var session: CK_SESSION_HANDLE = 0
    private var open = false

    /// Attribute templates whose values stay allocated while the template lives.
    struct Template {
        final class Storage {
            var buffers: [UnsafeMutableRawPointer] = []
            deinit { for buffer in buffers { buffer.deallocate() } }
        }
        private(set) var attributes: [CK_ATTRIBUTE] = []
        private let storage = Storage()

        mutating func add(_ type: some BinaryInteger, bytes: [UInt8]) {
            let buffer = UnsafeMutableRawPointer.allocate(byteCount: max(bytes.count, 1), alignment: 16)
            bytes.withUnsafeBytes { buffer.copyMemory(from: $0.baseAddress!, byteCount: bytes.count) }
            storage.buffers.append(buffer)
            attributes.append(CK_ATTRIBUTE(type: CK_ATTRIBUTE_TYPE(type), pValue: buffer, ulValueLen: CK_ULONG(bytes.count)))
        }

        mutating func add(_ type: some BinaryInteger, ulong value: some BinaryInteger) {
            add(type, bytes: withUnsafeBytes(of: CK_ULONG(value)) { Array($0) })
        }

        mutating func add(_ type: some BinaryInteger, bool value: Bool) {
            add(type, bytes: [value ? 1 : 0])
        }
    }

    /// Ed25519 keys of class `keyClass` matching the URI's label and id.
    static func template(class keyClass: some BinaryInteger, uri: PKCS11URI) -> Template {
        var template = Template()
        template.add(CKA_CLASS, ulong: keyClass)
        template.add(CKA_KEY_TYPE, ulong: CKK_EC_EDWARDS)
        if let object = uri.object { template.add(CKA_LABEL, bytes: Array(object.utf8)) }
        if let id = uri.id { template.add(CKA_ID, bytes: id) }
        return template
    }

    init(_ uri: PKCS11URI) throws(PKCS11Error) {
        module = try PKCS11Module.shared(try uri.module())
        // (From here, deinit undoes what was done.)
        let slot = try findSlot(uri)
        var handle: CK_SESSION_HANDLE = 0
        try check(functions.pointee.C_OpenSession?(slot, CK_FLAGS(CKF_SERIAL_SESSION | CKF_RW_SESSION), nil, nil, &handle), "C_OpenSession")
        (session, open) = (handle, true)
        if let pin = try uri.pin() {
            var bytes = Array(pin.utf8)
            let result = functions.pointee.C_Login?(session, CK_USER_TYPE(CKU_USER), &bytes, CK_ULONG(bytes.count)) ?? CK_RV(CKR_FUNCTION_NOT_SUPPORTED)
            for index in bytes.indices { bytes[index] = 0 }
            guard result == CKR_OK || result == CKR_USER_ALREADY_LOGGED_IN else {
                throw PKCS11Error(result == CKR_PIN_INCORRECT ? "the token refused the PIN (CKR_PIN_INCORRECT)" : "logging in to the token failed (\(Self.name(result)))")
            }
        }
    }

    deinit {
        if open { _ = functions.pointee.C_CloseSession?(session) }
    }

    private func check(_ result: CK_RV?, _ call: String) throws(PKCS11Error) {
        let result = result ?? CK_RV(CKR_FUNCTION_NOT_SUPPORTED)
        guard result == CKR_OK else { throw PKCS11Error("\(call) failed (\(Self.name(result)))") }
    }

    static func name(_ result: CK_RV) -> String {
        let known: [CK_RV: String] = [
            CK_RV(CKR_PIN_INCORRECT): "CKR_PIN_INCORRECT", CK_RV(CKR_USER_NOT_LOGGED_IN): "CKR_USER_NOT_LOGGED_IN",
            CK_RV(CKR_MECHANISM_INVALID): "CKR_MECHANISM_INVALID", CK_RV(CKR_TOKEN_NOT_PRESENT): "CKR_TOKEN_NOT_PRESENT",
            CK_RV(CKR_KEY_TYPE_INCONSISTENT): "CKR_KEY_TYPE_INCONSISTENT", CK_RV(CKR_ATTRIBUTE_VALUE_INVALID): "CKR_ATTRIBUTE_VALUE_INVALID",
            CK_RV(CKR_FUNCTION_NOT_SUPPORTED): "CKR_FUNCTION_NOT_SUPPORTED", CK_RV(CKR_TEMPLATE_INCONSISTENT): "CKR_TEMPLATE_INCONSISTENT",
        ]
        return known[result] ?? "CK_RV 0x\(String(result, radix: 16))"
    }

    /// The slot whose token matches the URI's token, serial, manufacturer and model.
    private func findSlot(_ uri: PKCS11URI) throws(PKCS11Error) -> CK_SLOT_ID {
        var count: CK_ULONG = 0
        try check(functions.pointee.C_GetSlotList?(CK_BBOOL(CK_TRUE), nil, &count), "C_GetSlotList")
        var slots = [CK_SLOT_ID](repeating: 0, count: Int(count))
        try check(functions.pointee.C_GetSlotList?(CK_BBOOL(CK_TRUE), &slots, &count), "C_GetSlotList")
        var matching: [CK_SLOT_ID] = []
        for slot in slots.prefix(Int(count)) {
            var info = CK_TOKEN_INFO()
            guard functions.pointee.C_GetTokenInfo?(slot, &info) == CKR_OK else { continue }
            func field<T>(_ value: T) -> String {
                withUnsafeBytes(of: value) { String(decoding: $0, as: UTF8.self) }.trimmingCharacters(in: CharacterSet(charactersIn: " \0"))
            }
            if let token = uri.token, field(info.label) != token { continue }
            if let serial = uri.serial, field(info.serialNumber) != serial { continue }
            if let manufacturer = uri.manufacturer, field(info.manufacturerID) != manufacturer { continue }
            if let model = uri.model, field(info.model) != model { continue }
            matching.append(slot)
        }
        guard matching.count == 1 else {
            throw PKCS11Error(matching.isEmpty ? "no token present matches \(uri.description)" : "\(matching.count) tokens match \(uri.description): name one (token=, serial=)")
        }
        return matching[0]
    }

    /// The objects matching `template` (at most 16).
    func find(_ template: Template) throws(PKCS11Error) -> [CK_OBJECT_HANDLE] {
        var attributes = template.attributes
        try check(functions.pointee.C_FindObjectsInit?(session, &attributes, CK_ULONG(attributes.count)), "C_FindObjectsInit")
        var handles = [CK_OBJECT_HANDLE](repeating: 0, count: 16)
        var found: CK_ULONG = 0
        let result = functions.pointee.C_FindObjects?(session, &handles, CK_ULONG(handles.count), &found)
        _ = functions.pointee.C_FindObjectsFinal?(session)
        try check(result, "C_FindObjects")
        withExtendedLifetime(template) {}
        return Array(handles.prefix(Int(found)))
    }

    /// An attribute's bytes (at most 1 KiB).
    private func attribute(_ object: CK_OBJECT_HANDLE, _ type: some BinaryInteger) throws(PKCS11Error) -> [UInt8] {
        var query = CK_ATTRIBUTE(type: CK_ATTRIBUTE_TYPE(type), pValue: nil, ulValueLen: 0)
        try check(functions.pointee.C_GetAttributeValue?(session, object, &query, 1), "C_GetAttributeValue")
        guard query.ulValueLen <= 1024 else { throw PKCS11Error("a key attribute of \(query.ulValueLen) bytes") }
        var bytes = [UInt8](repeating: 0, count: Int(query.ulValueLen))
        let result = bytes.withUnsafeMutableBytes { buffer in
            var read = CK_ATTRIBUTE(type: CK_ATTRIBUTE_TYPE(type), pValue: buffer.baseAddress, ulValueLen: CK_ULONG(buffer.count))
            return functions.pointee.C_GetAttributeValue?(session, object, &read, 1)
        }
        try check(result, "C_GetAttributeValue")
        return bytes
    }

    /// A public key object's Ed25519 key: CKA_EC_POINT, a DER OCTET STRING of the 32 bytes (or the
    /// bare 32 bytes, as some tokens give it).
    func ed25519PublicKey(_ object: CK_OBJECT_HANDLE) throws(PKCS11Error) -> Ed25519PublicKey {
        let point = try attribute(object, CKA_EC_POINT)
        let raw = point.count == 34 && point[0] == 0x04 && point[1] == 0x20 ? Array(point[2...]) : point
        do {
            return try Ed25519PublicKey(rawRepresentation: raw)
        } catch {
            throw PKCS11Error("the token's public key is not an Ed25519 key depot takes: \(error)")
        }
    }

    /// Signs `message` with the private key `key` (CKM_EDDSA: pure Ed25519, RFC 8032).
    func signEdDSA(_ key: CK_OBJECT_HANDLE, _ message: [UInt8]) throws(PKCS11Error) -> [UInt8] {
        var mechanism = CK_MECHANISM(mechanism: CK_MECHANISM_TYPE(CKM_EDDSA), pParameter: nil, ulParameterLen: 0)
        try check(functions.pointee.C_SignInit?(session, &mechanism, key), "C_SignInit (CKM_EDDSA)")
        var data = message
        var signature = [UInt8](repeating: 0, count: 64)
        var length = CK_ULONG(signature.count)
        try check(functions.pointee.C_Sign?(session, &data, CK_ULONG(data.count), &signature, &length), "C_Sign")
        guard length == 64 else { throw PKCS11Error("the token's EdDSA signature is \(length) bytes, not 64") }
        return signature
    }

    /// A new Ed25519 key pair on the token: the private key sensitive, not extractable, private.
    func generateEd25519(label: String, id: [UInt8], curve: [UInt8]? = nil) throws(PKCS11Error) -> (publicKey: CK_OBJECT_HANDLE, privateKey: CK_OBJECT_HANDLE) {
        var mechanism = CK_MECHANISM(mechanism: CK_MECHANISM_TYPE(CKM_EC_EDWARDS_KEY_PAIR_GEN), pParameter: nil, ulParameterLen: 0)
        var publicTemplate = Template()
        publicTemplate.add(CKA_TOKEN, bool: true)
        publicTemplate.add(CKA_VERIFY, bool: true)
        // The curve by name, as a PrintableString "edwards25519" (PKCS#11 3.0, 2.3.5), or, where a
        // token takes only that, by RFC 8410's OID 1.3.101.112.
        publicTemplate.add(CKA_EC_PARAMS, bytes: curve ?? [0x13, 0x0c] + Array("edwards25519".utf8))
        publicTemplate.add(CKA_LABEL, bytes: Array(label.utf8))
        publicTemplate.add(CKA_ID, bytes: id)
        var privateTemplate = Template()
        privateTemplate.add(CKA_TOKEN, bool: true)
        privateTemplate.add(CKA_PRIVATE, bool: true)
        privateTemplate.add(CKA_SENSITIVE, bool: true)
        privateTemplate.add(CKA_EXTRACTABLE, bool: false)
        privateTemplate.add(CKA_SIGN, bool: true)
        privateTemplate.add(CKA_LABEL, bytes: Array(label.utf8))
        privateTemplate.add(CKA_ID, bytes: id)
        var publicAttributes = publicTemplate.attributes, privateAttributes = privateTemplate.attributes
        var publicKey: CK_OBJECT_HANDLE = 0, privateKey: CK_OBJECT_HANDLE = 0
        let result = functions.pointee.C_GenerateKeyPair?(
            session, &mechanism, &publicAttributes, CK_ULONG(publicAttributes.count), &privateAttributes, CK_ULONG(privateAttributes.count), &publicKey, &privateKey
        )
        withExtendedLifetime((publicTemplate, privateTemplate)) {}
        if result != CKR_OK && curve == nil {
            return try generateEd25519(label: label, id: id, curve: [0x06, 0x03, 0x2b, 0x65, 0x70])
        }
        try check(result, "C_GenerateKeyPair (CKM_EC_EDWARDS_KEY_PAIR_GEN)")
        return (publicKey, privateKey)
    }

    /// Removes objects from the token (a key pair generated here that failed its check).
    func destroy(_ objects: [CK_OBJECT_HANDLE]) {
        for object in objects { _ = functions.pointee.C_DestroyObject?(session, object) }
    }
}
