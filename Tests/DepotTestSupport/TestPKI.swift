import Foundation

/// A certificate authority made for one test with the `openssl` command line, and a server
/// certificate it signed for `host` (and 127.0.0.1): what an operator's CA gives an edge.
public struct TestPKI: Sendable {
    /// The CA certificate (PEM), for `--ca-file`.
    public let caFile: String
    /// The server certificate and its key (PEM).
    public let certificate: String
    public let key: String

    public init(folder: String, host: String) throws {
        caFile = folder + "/ca.pem"
        certificate = folder + "/leaf.pem"
        key = folder + "/leaf.key"
        let extensions = folder + "/leaf.ext"
        try Array("subjectAltName=DNS:\(host),IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n".utf8)
            .write(to: extensions)
        let steps: [[String]] = [
            ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", folder + "/ca.key", "-out", caFile, "-days", "2", "-subj", "/CN=AssetDepot Test CA"],
            ["req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", folder + "/leaf.csr", "-subj", "/CN=\(host)"],
            ["x509", "-req", "-in", folder + "/leaf.csr", "-CA", caFile, "-CAkey", folder + "/ca.key", "-CAcreateserial", "-out", certificate,
             "-days", "2", "-extfile", extensions],
        ]
        for step in steps {
            let result = try Processes.run("/usr/bin/openssl", step)
            guard result.status == 0 else { throw POSIXError(.EINVAL) }
        }
    }
}

extension Array where Element == UInt8 {
    func write(to path: String) throws { try Data(self).write(to: URL(fileURLWithPath: path)) }
}
