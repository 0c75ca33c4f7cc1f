// The shapes of App Attest's objects, read strictly: any field missing, of the wrong type or
// length, or cut short is a `format` refusal before a single check runs.

/// An attestation object: `{fmt: "apple-appattest", attStmt: {x5c: [leaf, intermediate…], receipt}, authData}`.
struct AttestationObject {
    let certificates: [[UInt8]]
    let receipt: [UInt8]
    let authenticatorData: [UInt8]
    let data: AttestedAuthenticatorData

    init(_ object: [UInt8]) throws(AppAttestRefusal) {
        guard object.count <= AppAttestVerifier.maximumAttestationBytes else {
            throw AppAttestRefusal(.format, "the attestation object is \(object.count) bytes, at most \(AppAttestVerifier.maximumAttestationBytes) expected")
        }
        let value: CBORValue
        do {
            value = try CBORDecoder.decode(object)
        } catch {
            throw AppAttestRefusal(.format, "the attestation object is not CBOR: \(error)")
        }
        guard case .map = value else { throw AppAttestRefusal(.format, "the attestation object is not a CBOR map") }
        guard value["fmt"]?.text?.utf8.elementsEqual("apple-appattest".utf8) == true else {
            throw AppAttestRefusal(.format, "fmt is not \"apple-appattest\"")
        }
        guard let statement = value["attStmt"], case .map = statement else {
            throw AppAttestRefusal(.format, "attStmt is missing or not a map")
        }
        guard case .array(let x5c)? = statement["x5c"], !x5c.isEmpty, x5c.count <= 4 else {
            throw AppAttestRefusal(.format, "attStmt.x5c is not an array of 1 to 4 certificates")
        }
        var certificates: [[UInt8]] = []
        for item in x5c {
            guard let der = item.byteString, !der.isEmpty else { throw AppAttestRefusal(.format, "an x5c entry is not a byte string") }
            certificates.append(der)
        }
        guard let receipt = statement["receipt"]?.byteString else {
            throw AppAttestRefusal(.format, "attStmt.receipt is missing or not a byte string")
        }
        guard let authenticatorData = value["authData"]?.byteString else {
            throw AppAttestRefusal(.format, "authData is missing or not a byte string")
        }
        self.certificates = certificates
        self.receipt = receipt
        self.authenticatorData = authenticatorData
        data = try AttestedAuthenticatorData(authenticatorData)
    }
}

/// Authenticator data with attested credential data (WebAuthn §6.1): rpIdHash(32) ‖ flags(1) ‖
/// counter(4) ‖ aaguid(16) ‖ credentialIdLength(2) ‖ credentialId ‖ credentialPublicKey (COSE) [‖ extensions].
/// The COSE key's end is found by decoding it; bytes after it (Apple's sample carries an
/// extensions map there while its flags say only AT) are accepted and not read.
struct AttestedAuthenticatorData {
    let rpIDHash: [UInt8]
    let flags: UInt8
    let counter: UInt32
    let aaguid: [UInt8]
    let credentialID: [UInt8]
    /// The COSE EC2 key as an X9.63 uncompressed point.
    let credentialPublicKey: [UInt8]

    init(_ bytes: [UInt8]) throws(AppAttestRefusal) {
        guard bytes.count >= 55 else {
            throw AppAttestRefusal(.format, "authData is \(bytes.count) bytes, at least 55 expected (with attested credential data)")
        }
        rpIDHash = Array(bytes[0..<32])
        flags = bytes[32]
        counter = bytes[33..<37].reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
        guard flags & 0x40 != 0 else { throw AppAttestRefusal(.format, "authData's flags (\(flags)) do not announce attested credential data") }
        aaguid = Array(bytes[37..<53])
        let idLength = Int(bytes[53]) << 8 | Int(bytes[54])
        guard idLength <= bytes.count - 55 else {
            throw AppAttestRefusal(.format, "authData declares a credential id of \(idLength) bytes with \(bytes.count - 55) left")
        }
        credentialID = Array(bytes[55..<55 + idLength])
        let key: CBORValue
        do {
            key = try CBORDecoder.decodePrefix(Array(bytes[(55 + idLength)...])).value
        } catch {
            throw AppAttestRefusal(.format, "authData's credential public key is not CBOR: \(error)")
        }
        guard let point = Self.p256Point(cose: key) else {
            throw AppAttestRefusal(.format, "authData's credential public key is not a COSE EC2 P-256 ES256 key")
        }
        credentialPublicKey = point
    }

    /// `{1: 2 (EC2), 3: -7 (ES256), -1: 1 (P-256), -2: x, -3: y}` as 0x04 ‖ x ‖ y.
    static func p256Point(cose key: CBORValue) -> [UInt8]? {
        guard key[integer: 1] == .unsigned(2), key[integer: -1] == .unsigned(1),
              key[integer: 3] == nil || key[integer: 3] == .negative(6),
              let x = key[integer: -2]?.byteString, let y = key[integer: -3]?.byteString, x.count == 32, y.count == 32 else { return nil }
        return [0x04] + x + y
    }
}

/// An assertion: `{signature, authenticatorData}`, authenticatorData = rpIdHash(32) ‖ flags(1) ‖ counter(4) [‖ more].
struct AssertionObject {
    let signature: [UInt8]
    let authenticatorData: [UInt8]
    let rpIDHash: [UInt8]
    let counter: UInt32

    init(_ assertion: [UInt8]) throws(AppAttestRefusal) {
        guard assertion.count <= AppAttestVerifier.maximumAssertionBytes else {
            throw AppAttestRefusal(.format, "the assertion is \(assertion.count) bytes, at most \(AppAttestVerifier.maximumAssertionBytes) expected")
        }
        let value: CBORValue
        do {
            value = try CBORDecoder.decode(assertion)
        } catch {
            throw AppAttestRefusal(.format, "the assertion is not CBOR: \(error)")
        }
        guard let signature = value["signature"]?.byteString, !signature.isEmpty else {
            throw AppAttestRefusal(.format, "the assertion's signature is missing or not a byte string")
        }
        guard let data = value["authenticatorData"]?.byteString else {
            throw AppAttestRefusal(.format, "the assertion's authenticatorData is missing or not a byte string")
        }
        guard data.count >= 37 else {
            throw AppAttestRefusal(.format, "the assertion's authenticatorData is \(data.count) bytes, at least 37 expected")
        }
        self.signature = signature
        authenticatorData = data
        rpIDHash = Array(data[0..<32])
        counter = data[33..<37].reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
    }
}

/// The nonce extension's value, DER `SEQUENCE { [1] EXPLICIT OCTET STRING (32 bytes) }`, read
/// strictly: each length in definite DER form and exactly filling its parent, nothing after.
enum DERNonce {
    static func octets(_ der: [UInt8]) -> [UInt8]? {
        guard let sequence = element(tag: 0x30, in: der[...]),
              let explicit = element(tag: 0xa1, in: sequence),
              let octets = element(tag: 0x04, in: explicit), octets.count == 32 else { return nil }
        return Array(octets)
    }

    /// The content of the one element `bytes` holds, if its tag is `tag` and it fills `bytes` exactly.
    static func element(tag: UInt8, in bytes: ArraySlice<UInt8>) -> ArraySlice<UInt8>? {
        var index = bytes.startIndex
        guard bytes.count >= 2, bytes[index] == tag else { return nil }
        index += 1
        let first = bytes[index]
        index += 1
        var length: Int
        if first < 0x80 {
            length = Int(first)
        } else {
            let size = Int(first & 0x7f)
            guard (1...2).contains(size), bytes.endIndex - index >= size else { return nil }
            length = 0
            for _ in 0..<size {
                length = length << 8 | Int(bytes[index])
                index += 1
            }
            // DER: the shortest form only.
            guard length >= 0x80, size == 1 || length > 0xff else { return nil }
        }
        guard length == bytes.endIndex - index else { return nil }
        return bytes[index...]
    }
}
