// Fuzz target: the client's response parser (DepotTransport/HTTPResponseParser.swift),
// compiled with it. Input: one byte of limit (the body limit is that × 64 bytes), then what a
// server sends. The head is parsed as the client does; its body is decoded by the framing the
// head declares, fed in pieces of varying size. Whatever the input: no trap, the decoded body
// never passes the limit, and a chunked body decodes to the same bytes however it is split.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzResponse(_ data: UnsafePointer<UInt8>, _ count: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: count))
    guard let first = bytes.first else { return 0 }
    let limit = Int64(first) * 64
    let input = Array(bytes.dropFirst())
    guard let end = input.firstRange(of: [13, 10, 13, 10]) else { return 0 }
    guard let head = try? HTTPResponseParser.parseHead(input[..<end.lowerBound]) else { return 0 }
    precondition((100...599).contains(head.status))
    guard let framing = try? HTTPResponseParser.framing(status: head.status, headers: head.headers, method: "GET") else { return 0 }
    let body = Array(input[end.upperBound...])
    guard framing == .chunked else { return 0 }
    func decode(step: Int) -> [UInt8]? {
        var decoder = HTTPResponseParser.ChunkedDecoder(limit: limit)
        var out: [UInt8] = []
        var offset = 0
        while offset < body.count && !decoder.isDone {
            let piece = Array(body[offset..<min(body.count, offset + step)])
            guard let used = try? piece.withUnsafeBytes({ try decoder.decode($0) { out += $0 } }) else { return nil }
            precondition(used <= piece.count && (used == piece.count || decoder.isDone))
            offset += used
        }
        precondition(Int64(out.count) <= limit && Int64(out.count) == decoder.received || !decoder.isDone)
        return decoder.isDone ? out : nil
    }
    let whole = decode(step: body.count + 1)
    let split = decode(step: 1 + Int(first % 7))
    precondition(whole == split, "a chunked body decoded differently when split")
    return 0
}
