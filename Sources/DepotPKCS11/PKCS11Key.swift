import CPKCS11
import DepotCore
import Foundation

/// An Ed25519 key in a PKCS#11 token (a YubiHSM 2, a Nitrokey HSM, SoftHSM2…): it signs root
/// documents and release statements with CKM_EDDSA, and its private half never leaves the token —
/// a key it generates is sensitive and not extractable, and no call here reads a private value.
/// Each signature is verified with the public key before it is used.
///
/// It owns one session on the token (``PKCS11Session``); signing is serialised per module.
public final class PKCS11Key: Ed25519Signer, @unchecked Sendable {
    public let publicKey: Ed25519PublicKey
    /// What the URI named (for messages).
    public let name: String
    private let session: PKCS11Session
    private let handle: CK_OBJECT_HANDLE

    private init(session: PKCS11Session, handle: CK_OBJECT_HANDLE, publicKey: Ed25519PublicKey, name: String) {
        (self.session, self.handle, self.publicKey, self.name) = (session, handle, publicKey, name)
    }

    /// The existing key the URI names: exactly one Ed25519 private key on the token matches its
    /// label and id, and its public key object (same label and id) gives the public half.
    public static func open(_ uri: PKCS11URI) throws(PKCS11Error) -> PKCS11Key {
        let session = try PKCS11Session(uri)
        let privateKeys = try session.find(PKCS11Session.template(class: CKO_PRIVATE_KEY, uri: uri))
        guard privateKeys.count == 1 else {
            throw PKCS11Error(privateKeys.isEmpty ? "no Ed25519 private key on the token matches \(uri.description)" : "\(privateKeys.count) Ed25519 private keys on the token match \(uri.description): name one (object= and id=)")
        }
        let publicKeys = try session.find(PKCS11Session.template(class: CKO_PUBLIC_KEY, uri: uri))
        guard publicKeys.count == 1 else { throw PKCS11Error("the token holds no single Ed25519 public key object matching \(uri.description), to read the key's public half from") }
        let publicKey = try session.ed25519PublicKey(publicKeys[0])
        let key = PKCS11Key(session: session, handle: privateKeys[0], publicKey: publicKey, name: uri.description)
        // The public object is the private key's own: a signature it makes verifies with it.
        _ = try key.checkedSignature(Array("depot: does this token key match its public key".utf8))
        return key
    }

    /// A new key pair generated in the token under the URI's label and id (both required, and no
    /// key may hold them yet): sensitive, never extractable, on the token.
    public static func generate(_ uri: PKCS11URI) throws(PKCS11Error) -> PKCS11Key {
        guard let label = uri.object, let id = uri.id, !id.isEmpty else {
            throw PKCS11Error("to generate a key, the pkcs11: URI names its label and id: object=<label>;id=<%xx bytes>")
        }
        let session = try PKCS11Session(uri)
        var anyKey = PKCS11Session.Template()
        anyKey.add(CKA_ID, bytes: id)
        var byLabel = PKCS11Session.Template()
        byLabel.add(CKA_LABEL, bytes: Array(label.utf8))
        guard try session.find(anyKey).isEmpty, try session.find(byLabel).isEmpty else {
            throw PKCS11Error("the token already holds an object labelled \"\(label)\" or with id \(id.map { String(format: "%02x", $0) }.joined()): nothing was generated")
        }
        let handles = try session.generateEd25519(label: label, id: id)
        do throws(PKCS11Error) {
            let key = PKCS11Key(session: session, handle: handles.privateKey, publicKey: try session.ed25519PublicKey(handles.publicKey), name: uri.description)
            _ = try key.checkedSignature(Array("depot: a new token key".utf8))
            return key
        } catch {
            // A pair that cannot sign as its public key says is not left behind under the label.
            session.destroy([handles.privateKey, handles.publicKey])
            throw error
        }
    }

    public func signature(for message: [UInt8]) throws -> [UInt8] {
        try checkedSignature(message)
    }

    private func checkedSignature(_ message: [UInt8]) throws(PKCS11Error) -> [UInt8] {
        session.module.lock.lock()
        defer { session.module.lock.unlock() }
        let signature = try session.signEdDSA(handle, message)
        guard publicKey.isValidSignature(signature, for: message) else {
            throw PKCS11Error("the token's signature with \(name) does not verify with its public key: the token or its module is faulty; nothing was signed")
        }
        return signature
    }
}
