import DepotCore

extension AppAttestVerifier {
    /// An assertion over `clientData` (the server hashes it: clientDataHash = SHA-256(clientData))
    /// by `key`, whose last counter was `counter`; returns the assertion's counter (> counter).
    ///
    /// Apple's order ("Verify the assertion"): the signature first, so that a refusal naming the
    /// App ID or the counter is only ever given for bytes the key really signed. The work before
    /// the one ECDSA verification is bounded by ``maximumAssertionBytes``.
    public func assertion(_ assertion: [UInt8], clientData: [UInt8], key: AttestedKey, after counter: UInt32) throws(AppAttestRefusal) -> UInt32 {
        let parsed = try AssertionObject(assertion)
        let nonce = SHA256Hasher.hash(parsed.authenticatorData + SHA256Hasher.hash(clientData))
        guard P256Signature.isValid(parsed.signature, for: nonce, publicKey: key.publicKey) else {
            throw AppAttestRefusal(.signature, "the signature does not verify with the key \(Self.base64(key.keyID)) over SHA-256(authenticatorData ‖ SHA-256(clientData)): other client data, or another key")
        }
        let rpIDHash = SHA256Hasher.hash(Array(appID.utf8))
        guard parsed.rpIDHash == rpIDHash else {
            throw AppAttestRefusal(.appID, "authenticatorData's rpIdHash is \(Self.hex(parsed.rpIDHash)), expected SHA-256(\"\(appID)\") = \(Self.hex(rpIDHash))")
        }
        guard parsed.counter > counter else {
            throw AppAttestRefusal(.counter, "the assertion's counter is \(parsed.counter), expected more than the last one seen, \(counter) (a replayed or stale assertion)")
        }
        return parsed.counter
    }
}
