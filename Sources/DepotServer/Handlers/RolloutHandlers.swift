import DepotCore
import DepotHTTP
import Foundation
import Synchronization

/// Rollouts (publisher tokens; halting also admin ones, which every publisher route accepts),
/// fleet figures, and the devices' reports (`POST …/reports`, with the app's download access).
struct RolloutHandlers: Sendable {
    let rollouts: Rollouts
    let limiter: ReportRateLimiter
    /// The App Attest keys attested reports are signed with (``ReportAssertion``).
    let keys: AttestedKeys

    private func by(_ context: RequestContext) -> String { context.token.map { "token " + $0.id } ?? "unknown" }

    private static func fraction(_ context: RequestContext) throws -> Double {
        guard let text = context.query("fraction"), let value = Double(text) else {
            throw DepotError.badRequest("name the share of devices: ?fraction=F (0.1 is 10 %)")
        }
        return value
    }

    /// What the caller saw, from `release=N`, `state=running|halted`, `steps=K` (each optional).
    private static func expectation(_ context: RequestContext) throws -> RolloutExpectation {
        var expected = RolloutExpectation()
        if let text = context.query("release") {
            guard let release = ReleaseNumber.parse(text) else { throw DepotError.badRequest("release is the candidate release you saw: ?release=N") }
            expected.release = release
        }
        if let text = context.query("state") {
            guard let state = RolloutRecord.State(rawValue: text), state != .completed else {
                throw DepotError.badRequest("state is the rollout's state you saw: running or halted")
            }
            expected.state = state
        }
        if let text = context.query("steps") {
            guard let steps = Int(text), steps >= 0 else { throw DepotError.badRequest("steps is the number of steps you saw (a whole number)") }
            expected.steps = steps
        }
        return expected
    }

    /// `GET …/rollouts/{channel}`: the state, the fraction, the candidate's report figures.
    func status(_ context: RequestContext) throws -> HTTPResponse {
        try Self.private(rollouts.status(context.app, channel: context["channel"]))
    }

    /// `POST …/rollouts/{channel}/start?release=N&fraction=F[&haltOnFailureRate=R&minReports=M][&attestedOnly=true][&force=true]`.
    func start(_ context: RequestContext) throws -> HTTPResponse {
        try context.requireChannel(context["channel"])
        guard let release = context.query("release").flatMap(ReleaseNumber.parse) else {
            throw DepotError.badRequest("name the release to roll out: ?release=N")
        }
        let rate = try context.query("haltOnFailureRate").map { text -> Double in
            guard let value = Double(text) else { throw DepotError.badRequest("haltOnFailureRate is a number: 0.05 halts above 5 % failures") }
            return value
        }
        let minimum = try context.query("minReports").map { text -> Int in
            guard let value = Int(text) else { throw DepotError.badRequest("minReports is a whole number") }
            return value
        }
        let status = try rollouts.start(
            context.app, channel: context["channel"], release: release, fraction: Self.fraction(context), haltOnFailureRate: rate, minReports: minimum,
            attestedOnly: context.flag("attestedOnly"), force: context.flag("force"), acceptRetiredKeys: context.flag("acceptRetiredKeys"), by: by(context)
        )
        return try Self.private(status, status: 201)
    }

    /// `POST …/rollouts/{channel}/advance?fraction=F[&release=N][&state=S][&steps=K]`.
    func advance(_ context: RequestContext) throws -> HTTPResponse {
        try context.requireChannel(context["channel"])
        let status = try rollouts.advance(
            context.app, channel: context["channel"], fraction: Self.fraction(context), by: by(context), expecting: Self.expectation(context)
        )
        return try Self.private(status, status: 201)
    }

    /// `POST …/rollouts/{channel}/halt[?release=N][&state=S][&steps=K]`.
    func halt(_ context: RequestContext) throws -> HTTPResponse {
        try context.requireChannel(context["channel"])
        let status = try rollouts.halt(context.app, channel: context["channel"], by: by(context), expecting: Self.expectation(context))
        rollouts.publisher.metrics.rolloutHalted(app: context.app, channel: context["channel"], by: "hand")
        return try Self.private(status, status: 201)
    }

    /// `POST …/rollouts/{channel}/complete[?release=N][&state=S][&steps=K]`.
    func complete(_ context: RequestContext) throws -> HTTPResponse {
        try context.requireChannel(context["channel"])
        return try Self.private(rollouts.complete(context.app, channel: context["channel"], by: by(context), expecting: Self.expectation(context)), status: 201)
    }

    /// `GET …/fleet[?channel=C][&days=D]`: per pack revision, what devices reported each day.
    func fleet(_ context: RequestContext) throws -> HTTPResponse {
        let channel = try UploadParameters.channel(context.query("channel"))
        var days = 14
        if let text = context.query("days") {
            guard let value = Int(text), (1...ReportBook.retentionDays).contains(value) else {
                throw DepotError.badRequest("days is 1 to \(ReportBook.retentionDays)")
            }
            days = value
        }
        return try Self.private(rollouts.fleet(context.app, channel: channel, days: days))
    }

    /// `POST …/reports`: one device report (JSON, at most 32 KiB), counted or refused; rate-limited
    /// per client address and in all before its body is read. No address is stored. With an App
    /// Attest assertion (``ReportAssertion``) it counts as attested once that is checked.
    func report(_ context: RequestContext) throws -> HTTPDisposition {
        let app = context.app
        let metrics = rollouts.publisher.metrics
        if let length = context.request.contentLength, length > Int64(DeviceReport.maximumBytes) {
            metrics.report(app: app, result: "too_large")
            throw DepotError.tooLarge(Int64(DeviceReport.maximumBytes))
        }
        // A report costs a token per KiB it declares (a body without a length, the most a report
        // may be): what the limits bound is the decoding a client can ask for, not its requests.
        let cost = Double(max(1, ((context.request.contentLength ?? Int64(DeviceReport.maximumBytes)) + 1023) / 1024))
        if let wait = limiter.take(address: ReportRateLimiter.key(context.request.clientAddress ?? ""), cost: cost) {
            metrics.report(app: app, result: "rate_limited")
            let refusal = HTTPFailure(status: 429, code: "rate_limited", message: "too many reports; try again in \(wait) s", headers: [("Retry-After", "\(wait)")])
            // The body (at most 32 KiB, checked above) is read and dropped, so that the connection
            // stays open: refusing before it would close it, and a flood would then cost the origin
            // a new connection per request.
            return .receiveBody(DiscardingReceiver(answer: ErrorResponse.response(for: refusal)))
        }
        let assertion: ReportAssertion?
        do {
            assertion = try ReportAssertion.read(context, keys: keys)
        } catch {
            metrics.report(app: app, result: (error as? DepotError)?.code ?? "invalid")
            // Read and dropped, as above: a flood of bad headers keeps its connections.
            return .receiveBody(DiscardingReceiver(answer: ErrorResponse.response(for: error)))
        }
        let address = ReportRateLimiter.key(context.request.clientAddress ?? "")
        return .receiveBody(ReportReceiver(
            app: app, book: rollouts.reports, metrics: metrics, assertion: assertion.map { ($0, keys) },
            charge: { [limiter] cost in limiter.charge(address: address, cost: cost) }
        ))
    }

    static func `private`(_ value: some Encodable, status: Int = 200) throws -> HTTPResponse {
        var response = try JSONResponse.make(value, status: status)
        response.headers.add("Cache-Control", "private, no-store")
        return response
    }
}

/// Reads one report body (bounded) and counts it.
final class ReportReceiver: HTTPBodyReceiver {
    private let app: String
    private let book: ReportBook
    private let metrics: OriginMetrics
    /// The report's assertion and the keys it is checked against; nil: an unattested report.
    private let assertion: (ReportAssertion, AttestedKeys)?
    /// Charges the sender's rate buckets for the work its report made (a release's listing read).
    private let charge: (Double) -> Void
    private var body: [UInt8] = []
    private var failed = false

    init(
        app: String, book: ReportBook, metrics: OriginMetrics, assertion: (ReportAssertion, AttestedKeys)? = nil, charge: @escaping (Double) -> Void = { _ in }
    ) {
        (self.app, self.book, self.metrics, self.assertion, self.charge) = (app, book, metrics, assertion, charge)
    }

    func receive(_ chunk: UnsafeRawBufferPointer) -> HTTPResponse? {
        guard body.count + chunk.count <= DeviceReport.maximumBytes else {
            failed = true
            body = []
            metrics.report(app: app, result: "too_large")
            return ErrorResponse.response(for: DepotError.tooLarge(Int64(DeviceReport.maximumBytes)))
        }
        body += chunk
        return nil
    }

    func finish() -> HTTPResponse {
        do {
            let report: DeviceReport
            var countedAttested = false
            do {
                report = try DeviceReport.decode(body)
            } catch let error as ManifestError {
                metrics.report(app: app, result: "invalid")
                throw DepotError.badRequest(error.description + "; the report was not counted")
            }
            do {
                // The assertion is checked over the exact bytes received, once the report passed
                // every other check; one that fails refuses the report (never counted unattested).
                try book.accept(report, app: app, attested: assertion != nil, charge: charge) { [body, assertion] in
                    guard let (assertion, keys) = assertion else { return true }
                    do {
                        countedAttested = try assertion.verify(body, report: report, keys: keys)
                    } catch let error as DepotError where error.code == "assertion_refused" || error.code == "stale_counter" {
                        // A signature checked in vain costs its sender more than a report's size:
                        // a flood of bad assertions under one genuine key id runs out of tokens
                        // after a few a second per address (genuine reports are not charged).
                        charge(ReportAssertion.refusedCost)
                        throw error
                    }
                    return countedAttested
                }
            } catch let error as DepotError {
                metrics.report(app: app, result: error.code)
                throw error
            } catch let failure as HTTPFailure {
                metrics.report(app: app, result: failure.status == 503 ? "shed" : failure.code)
                throw failure
            }
            metrics.report(app: app, result: assertion == nil ? "accepted" : countedAttested ? "accepted_attested" : "accepted_attested_again")
            // Accepted: counted by the writer within a second (the queue is bounded; see ReportBook).
            var response = HTTPResponse.bytes(Array("{\"accepted\":true}\n".utf8), status: 202, contentType: "application/json")
            response.headers.add("Cache-Control", "no-store")
            return response
        } catch {
            return ErrorResponse.response(for: error)
        }
    }

    func abort() { body = [] }
}

/// Reads a body of at most a report's size and drops it, then answers what it was given (a
/// larger one, chunked with no length, is refused with 413 as it passes the limit).
final class DiscardingReceiver: HTTPBodyReceiver {
    private let answer: HTTPResponse
    private var seen = 0
    init(answer: HTTPResponse) { self.answer = answer }
    func receive(_ chunk: UnsafeRawBufferPointer) -> HTTPResponse? {
        seen += chunk.count
        return seen > DeviceReport.maximumBytes ? ErrorResponse.response(for: DepotError.tooLarge(Int64(DeviceReport.maximumBytes))) : nil
    }
    func finish() -> HTTPResponse { answer }
    func abort() {}
}

/// Token buckets for reports: one per client address and one for all, a token per KiB of report
/// (most reports are under one). An edge or a carrier's NAT sends many devices' reports from
/// one address, so the defaults are generous (200 a second per address, 2,000 in all, each with
/// a burst of twice that); the buckets bound what a flood costs the origin to decode, not what a
/// fleet sends. Idle addresses are forgotten.
final class ReportRateLimiter: Sendable {
    struct Bucket {
        var tokens: Double
        var at: ContinuousClock.Instant
    }

    let perAddress: Double
    let total: Double

    /// What one bucket is kept for: an IPv4 address, or an IPv6 address's /64 (one subscriber's
    /// prefix: its 2⁶⁴ addresses are one sender).
    static func key(_ address: String) -> String {
        guard address.contains(":") else { return address }
        var bytes = [UInt8](repeating: 0, count: 16)
        guard inet_pton(AF_INET6, address, &bytes) == 1 else { return address }
        if bytes.prefix(12) == [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff] { return bytes.suffix(4).map(String.init).joined(separator: ".") }
        return bytes.prefix(8).map { String($0, radix: 16) }.joined(separator: ":") + "::/64"
    }
    private let state: Mutex<(all: Bucket, byAddress: [String: Bucket])>

    init(perAddress: Double, total: Double) {
        (self.perAddress, self.total) = (perAddress, total)
        let now = ContinuousClock.now
        state = Mutex((Bucket(tokens: total * 2, at: now), [:]))
    }

    /// Takes one report from both buckets; nil when allowed, else the seconds to wait. An
    /// address is remembered only once the bucket of all let its report through, and forgotten
    /// two seconds after its last one (when its bucket is full again), so the map holds at most
    /// about what the bucket of all lets through in two seconds.
    func take(address: String, cost: Double = 1, now: ContinuousClock.Instant = .now) -> Int? {
        state.withLock { state in
            func refill(_ bucket: inout Bucket, rate: Double) {
                let elapsed = Double((now - bucket.at).components.seconds) + Double((now - bucket.at).components.attoseconds) / 1e18
                bucket.tokens = min(rate * 2, bucket.tokens + max(0, elapsed) * rate)
                bucket.at = now
            }
            // A report larger than a bucket's burst waits for a full bucket (and empties it).
            let cost = min(cost, perAddress * 2, total * 2)
            /// Whole seconds until a bucket at `rate` holds the report's tokens again.
            func wait(_ bucket: Bucket, rate: Double) -> Int { max(1, Int(((cost - bucket.tokens) / rate).rounded(.up))) }
            refill(&state.all, rate: total)
            guard state.all.tokens >= cost else { return wait(state.all, rate: total) }
            let known = state.byAddress[address]
            var mine = known ?? Bucket(tokens: perAddress * 2, at: now)
            refill(&mine, rate: perAddress)
            guard mine.tokens >= cost else {
                // (A new address refused at once is not remembered: nothing to remember.)
                if known != nil { state.byAddress[address] = mine }
                return wait(mine, rate: perAddress)
            }
            mine.tokens -= cost
            state.all.tokens -= cost
            if state.byAddress.count >= 4_096 {
                state.byAddress = state.byAddress.filter { now - $0.value.at < .seconds(2) }
            }
            state.byAddress[address] = mine
            return nil
        }
    }

    /// Charges an address for work its report caused beyond its size (a release's listing read):
    /// its bucket may go into debt, down to minus a burst, which its next reports wait out. (Not
    /// the bucket of all: one sender's debt would refuse every other sender's reports.)
    func charge(address: String, cost: Double) {
        state.withLock { state in
            guard var mine = state.byAddress[address] else { return }
            mine.tokens = max(-perAddress * 2, mine.tokens - cost)
            state.byAddress[address] = mine
        }
    }
}
