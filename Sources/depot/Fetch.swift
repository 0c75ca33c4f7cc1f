import ArgumentParser
import DepotClient
import DepotCore
import Foundation

struct Fetch: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Download one file (a blob) with the client's downloader: resumable, retried, size- and hash-checked.",
        discussion: "A partial OUT left by an interrupted run is resumed with Range and If-Range. Without --size the server's Content-Length is taken. Used by Deploy/bench/fetch.sh to compare the downloader with curl."
    )

    @Argument(help: "The URL.") var url: String
    @Option(help: "Where the bytes go.") var out: String
    @Option(help: "The exact size expected; anything else fails.") var size: Int64?
    @Option(help: "The SHA-256 expected (hex), checked in a pass after the download.") var sha256: String?
    @OptionGroup var credentials: CredentialsOption
    @OptionGroup var connection: ConnectionOptions
    @Flag(help: "Print no progress.") var quiet = false

    func run() async throws {
        guard let target = URL(string: url), target.scheme == "http" || target.scheme == "https" else { throw CLIError("not an http(s) URL: \(url)") }
        var expected = size
        if expected == nil {
            let head = try await HTTPTransport(options: connection.options).send(method: "HEAD", to: target, headers: credentials.headers)
            guard head.status == 200, let length = head.header("Content-Length").flatMap({ Int64($0) }) else {
                throw CLIError("HEAD \(url): HTTP \(head.status)")
            }
            expected = length
        }
        let item = DownloadItem(id: FileSystem.lastComponent(of: out), url: target, size: expected!, sha256: sha256 ?? "", path: out)
        let progress = ProgressReporter(label: "downloading")
        let (events, task) = Downloader(concurrency: 1, headers: credentials.headers, options: connection.options).start([item])
        for await event in events where !quiet {
            if case .progress(_, let received, let total) = event { progress.update(received, of: total) }
        }
        progress.finish()
        do {
            _ = try await task.value[item.id]!.get()
        } catch {
            throw CLIError("fetch failed: \(error)")
        }
        guard let sha256 else {
            print("\(expected!) bytes")
            return
        }
        let digest = try SHA256Hasher.hexDigest(ofFile: out)
        guard sha256.lowercased() == digest else { throw CLIError("SHA-256 is \(digest), expected \(sha256)") }
        print("\(expected!) bytes, sha256 \(digest)")
    }
}
