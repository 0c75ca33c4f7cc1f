/// The gear hash's table: 256 fixed pseudo-random words (splitmix64 from a fixed seed). Only the
/// encoder uses it; the format does not depend on it.
enum Gear {
    static let table: [UInt64] = {
        var state: UInt64 = 0x4144_444C_2D67_6561  // "ADDL-gea"
        return (0..<256).map { _ in
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }()
}

/// Runs the gear hash over `bytes[0..<count]`, starting from `carried` (the hash at the end of
/// the bytes before), handing `(hash, index)` of each anchor to `anchor` in order; returns the
/// hash at the end. The hash depends on the last 64 bytes only, so the bytes are cut in four
/// lanes, each lane warmed on the 64 bytes before it, and run as four independent chains in one
/// loop: the same anchors as one byte after another, at the processor's throughput instead of
/// one chain's latency.
func gearAnchors(
    _ bytes: UnsafeBufferPointer<UInt8>, count: Int, carrying carried: UInt64, shift: UInt64, anchor: (UInt64, Int) -> Void
) -> UInt64 {
    Gear.table.withUnsafeBufferPointer { gear in
        let lane = count / 4
        guard lane >= 256 else {
            var h = carried
            for i in 0..<count {
                h = (h << 1) &+ gear[Int(bytes[i])]
                if h >> shift == 0 { anchor(h, i) }
            }
            return h
        }
        func warm(_ start: Int) -> UInt64 {
            var h: UInt64 = 0
            for i in (start - 64)..<start { h = (h << 1) &+ gear[Int(bytes[i])] }
            return h
        }
        var h0 = carried, h1 = warm(lane), h2 = warm(2 * lane), h3 = warm(3 * lane)
        var found1: [(UInt64, Int)] = [], found2: [(UInt64, Int)] = [], found3: [(UInt64, Int)] = []
        let limit: UInt64 = 1 << shift  // an anchor is a hash below it (its top bits zero)
        let g = gear.baseAddress!
        let p0 = bytes.baseAddress!, p1 = p0 + lane, p2 = p1 + lane, p3 = p2 + lane
        var i = 0
        while i < lane {
            h0 = (h0 &<< 1) &+ g[Int(p0[i])]
            h1 = (h1 &<< 1) &+ g[Int(p1[i])]
            h2 = (h2 &<< 1) &+ g[Int(p2[i])]
            h3 = (h3 &<< 1) &+ g[Int(p3[i])]
            if min(min(h0, h1), min(h2, h3)) < limit {  // rare: some lane is at an anchor
                if h0 < limit { anchor(h0, i) }
                if h1 < limit { found1.append((h1, lane &+ i)) }
                if h2 < limit { found2.append((h2, 2 &* lane &+ i)) }
                if h3 < limit { found3.append((h3, 3 &* lane &+ i)) }
            }
            i &+= 1
        }
        for (h, i) in found1 + found2 + found3 { anchor(h, i) }  // in order: lane after lane
        for i in (4 * lane)..<count {
            h3 = (h3 << 1) &+ gear[Int(bytes[i])]
            if h3 >> shift == 0 { anchor(h3, i) }
        }
        return h3
    }
}
