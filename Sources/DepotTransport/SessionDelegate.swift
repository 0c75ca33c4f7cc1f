import DepotCore
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The session's delegate: routes each task's callbacks to its ``TaskExchange``, and answers
/// authentication challenges with `.performDefaultHandling`, the system's own handling: server
/// trust above all, which arrives here on Apple platforms; and on Apple platforms HTTP Basic and
/// Digest too (the origin's download credentials, which callers send up front), for which the
/// session has no credential store, so the 401 comes back as a response (`.rejectProtectionSpace`
/// is, in Apple's words, for unusual cases: a server offering several schemes). On Linux,
/// FoundationNetworking's default handling of Basic never ends the task (seen: the call waits
/// until its deadline), so there Basic and Digest are declined with `.rejectProtectionSpace`.
final class SessionDelegate: NSObject, URLSessionDataDelegate, Sendable {
    private let exchanges = Locked<[Int: TaskExchange]>([:])

    func register(_ task: URLSessionTask, _ exchange: TaskExchange) {
        exchanges.withLock { $0[task.taskIdentifier] = exchange }
    }

    func unregister(_ task: URLSessionTask) {
        _ = exchanges.withLock { $0.removeValue(forKey: task.taskIdentifier) }
    }

    private func exchange(_ task: URLSessionTask) -> TaskExchange? {
        exchanges.withLock { $0[task.taskIdentifier] }
    }

    /// How an HTTP Basic or Digest challenge of a task is answered (see the type's summary).
    static var basicDisposition: URLSession.AuthChallengeDisposition {
        #if canImport(FoundationNetworking)
        .rejectProtectionSpace
        #else
        .performDefaultHandling
        #endif
    }

    /// Whether a challenge is one for credentials this client declines (HTTP Basic or Digest).
    static func declines(_ method: String) -> Bool {
        method == NSURLAuthenticationMethodHTTPBasic || method == NSURLAuthenticationMethodHTTPDigest
    }

    func urlSession(
        _ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse,
        completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void
    ) {
        guard let exchange = exchange(dataTask), let head = response as? HTTPURLResponse else {
            completionHandler(.cancel)
            return
        }
        completionHandler(exchange.receive(head) ? .allow : .cancel)
    }

    /// Redirects are never followed, as over the socket engine: a 3xx with a `Location` is the
    /// answer, for the caller to judge. (Followed, one could take a request and its credentials to another host.)
    func urlSession(
        _ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse, newRequest request: URLRequest,
        completionHandler: @escaping @Sendable (URLRequest?) -> Void
    ) {
        completionHandler(nil)
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        guard let exchange = exchange(dataTask) else { return }
        if !exchange.receive(data) { dataTask.cancel() }
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didSendBodyData bytesSent: Int64, totalBytesSent: Int64, totalBytesExpectedToSend: Int64) {
        exchange(task)?.progress?(totalBytesSent)
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        let finished = exchanges.withLock { $0.removeValue(forKey: task.taskIdentifier) }
        finished?.complete(error)
    }

    func urlSession(
        _ session: URLSession, task: URLSessionTask, didReceive challenge: URLAuthenticationChallenge,
        completionHandler: @escaping @Sendable (URLSession.AuthChallengeDisposition, URLCredential?) -> Void
    ) {
        guard Self.declines(challenge.protectionSpace.authenticationMethod) else {
            completionHandler(.performDefaultHandling, nil)
            return
        }
        exchange(task)?.markChallenged()
        completionHandler(Self.basicDisposition, nil)
    }

    func urlSession(
        _ session: URLSession, didReceive challenge: URLAuthenticationChallenge,
        completionHandler: @escaping @Sendable (URLSession.AuthChallengeDisposition, URLCredential?) -> Void
    ) {
        completionHandler(.performDefaultHandling, nil)
    }
}
