import Foundation

/// The plaintext a resumable upload has received past its last whole segment, sealed for its
/// stay on disk between requests, so that no plaintext ever reaches the disk.
///
/// Format (see <doc:PackContainer>, "Resumable uploads"): AES-256-GCM under
/// `HKDF-SHA256(master key, the container's salt, "assetdepot upload tail v1")`, a fresh random
/// 12-byte nonce per seal, the upload id (UTF-8) as additional data; stored as
/// `base64(nonce ‖ ciphertext ‖ tag)`, and as the empty string when nothing is pending.
public struct SealedTail {
    private let cipher: AES256GCM
    private let id: [UInt8]

    /// The sealer of upload `id`, whose container has `header`.
    public init(masterKey: [UInt8], header: PackHeader, id: String) throws {
        cipher = try AES256GCM(key: HKDF.deriveKey(
            inputKeyMaterial: masterKey, salt: header.salt, info: Array("assetdepot upload tail v1".utf8), length: 32
        ))
        self.id = Array(id.utf8)
    }

    /// Seals `plaintext`; empty for none.
    public func seal(_ plaintext: [UInt8]) throws -> String {
        guard !plaintext.isEmpty else { return "" }
        let nonce = SecureRandom.bytes(AES256GCM.nonceSize)
        var sealed = [UInt8](repeating: 0, count: plaintext.count + AES256GCM.tagSize)
        try plaintext.withUnsafeBytes { plain in
            try sealed.withUnsafeMutableBytes { try cipher.seal(plain, nonce: nonce, aad: id, into: $0) }
        }
        return Data(nonce + sealed).base64EncodedString()
    }

    /// Opens what ``seal(_:)`` made; throws ``PackError/tailDamaged`` for anything else.
    public func open(_ text: String) throws -> [UInt8] {
        guard !text.isEmpty else { return [] }
        guard let data = Data(base64Encoded: text), data.count >= AES256GCM.nonceSize + AES256GCM.tagSize else {
            throw PackError.tailDamaged
        }
        let bytes = Array(data)
        let nonce = Array(bytes[0..<AES256GCM.nonceSize])
        var plain = [UInt8](repeating: 0, count: bytes.count - AES256GCM.nonceSize - AES256GCM.tagSize)
        do {
            try bytes[AES256GCM.nonceSize...].withUnsafeBytes { sealed in
                try plain.withUnsafeMutableBytes { try cipher.open(sealed, nonce: nonce, aad: id, into: $0) }
            }
        } catch {
            throw PackError.tailDamaged
        }
        return plain
    }
}
