import ArgumentParser
import DepotCore
import DepotServer
import Foundation

/// Where blobs live: the data folder, or an S3 bucket (`--storage s3` and its options).
struct ObjectStoreOptions: ParsableArguments {
    @Option(help: "Where blobs live: files (the data folder's blobs/) or s3 (a bucket; env DEPOT_STORAGE).")
    var storage: String = Environment.string("DEPOT_STORAGE", "files")

    @Option(name: .customLong("s3-endpoint"), help: "With --storage s3: the store's URL, http(s)://host[:port] (env DEPOT_S3_ENDPOINT).")
    var s3Endpoint: String = Environment.string("DEPOT_S3_ENDPOINT", "")

    @Option(name: .customLong("s3-bucket"), help: "With --storage s3: the bucket, which must exist (env DEPOT_S3_BUCKET).")
    var s3Bucket: String = Environment.string("DEPOT_S3_BUCKET", "")

    @Option(name: .customLong("s3-region"), help: "With --storage s3: the region signed for (env DEPOT_S3_REGION).")
    var s3Region: String = Environment.string("DEPOT_S3_REGION", "us-east-1")

    @Option(name: .customLong("s3-prefix"), help: "With --storage s3: a prefix for every object key, e.g. assetdepot/ (env DEPOT_S3_PREFIX).")
    var s3Prefix: String = Environment.string("DEPOT_S3_PREFIX", "")

    @Option(name: .customLong("s3-url-style"), help: "With --storage s3: path (endpoint/bucket/key) or virtual-host (bucket.endpoint/key) (env DEPOT_S3_URL_STYLE).")
    var s3URLStyle: String = Environment.string("DEPOT_S3_URL_STYLE", "path")

    @Option(name: .customLong("s3-credentials"), help: "With --storage s3: a file holding the access key id on its first line, the secret on its second, optionally a session token on a third. Without it, AWS's chain: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (+AWS_SESSION_TOKEN), web identity (AWS_WEB_IDENTITY_TOKEN_FILE, AWS_ROLE_ARN), the container endpoint (AWS_CONTAINER_CREDENTIALS_*_URI), the instance metadata service (env DEPOT_S3_CREDENTIALS).")
    var s3Credentials: String = Environment.string("DEPOT_S3_CREDENTIALS", "")

    func validate() throws {
        guard storage == "files" || storage == "s3" else { throw ValidationError("--storage must be files or s3") }
        if storage == "s3" {
            guard let url = URL(string: s3Endpoint), url.scheme == "http" || url.scheme == "https", url.host != nil else {
                throw ValidationError("--storage s3 needs --s3-endpoint http(s)://host[:port]")
            }
            guard !s3Bucket.isEmpty else { throw ValidationError("--storage s3 needs --s3-bucket") }
            guard s3URLStyle == "path" || s3URLStyle == "virtual-host" else { throw ValidationError("--s3-url-style must be path or virtual-host") }
        }
    }

    /// The bucket, with keys from the first source of AWS's chain that is configured
    /// (``CredentialSource/resolve(environment:file:region:)``), fetched once now so that a
    /// misconfigured source fails at start. `serve` prints the source (never a secret).
    func objectStore() throws -> S3Location? {
        guard storage == "s3", let endpoint = URL(string: s3Endpoint) else { return nil }
        let source: CredentialSource
        do {
            source = try CredentialSource.resolve(environment: ProcessInfo.processInfo.environment, file: s3Credentials.isEmpty ? nil : s3Credentials, region: s3Region)
        } catch { throw CLIError("\(error)") }
        let provider = CredentialProvider(source)
        do { _ = try provider.current() } catch {
            var hint = ""
            if case .instanceMetadata = source {
                hint = " (the last of AWS's sources; none of --s3-credentials, AWS_ACCESS_KEY_ID, AWS_WEB_IDENTITY_TOKEN_FILE or AWS_CONTAINER_CREDENTIALS_*_URI is set)"
            }
            throw CLIError("--storage s3: no keys from \(source)\(hint): \(error)")
        }
        return S3Location(endpoint: endpoint, bucket: s3Bucket, region: s3Region, pathStyle: s3URLStyle == "path", prefix: s3Prefix, credentials: provider)
    }
}
