/// Header fields in arrival order, looked up without regard to case.
public struct HTTPHeaders: Sendable, Hashable, Sequence {
    /// The fields, in order, names as received.
    public private(set) var fields: [(name: String, value: String)]

    public init(_ fields: [(name: String, value: String)] = []) { self.fields = fields }

    /// No fields yet, room for `capacity` without growing.
    public init(capacity: Int) {
        fields = []
        fields.reserveCapacity(capacity)
    }

    /// The first value of `name`.
    public subscript(name: String) -> String? {
        fields.first { $0.name.caseInsensitiveEquals(name) }?.value
    }

    /// Every value of `name`, in order.
    public func values(_ name: String) -> [String] {
        fields.filter { $0.name.caseInsensitiveEquals(name) }.map(\.value)
    }

    /// Appends a field.
    public mutating func add(_ name: String, _ value: String) { fields.append((name, value)) }

    /// Replaces every field of `name` with one.
    public mutating func set(_ name: String, _ value: String) {
        fields.removeAll { $0.name.caseInsensitiveEquals(name) }
        fields.append((name, value))
    }

    public func makeIterator() -> IndexingIterator<[(name: String, value: String)]> { fields.makeIterator() }

    public static func == (lhs: HTTPHeaders, rhs: HTTPHeaders) -> Bool {
        lhs.fields.elementsEqual(rhs.fields) { $0.name == $1.name && $0.value == $1.value }
    }

    public func hash(into hasher: inout Hasher) {
        for field in fields {
            hasher.combine(field.name)
            hasher.combine(field.value)
        }
    }
}

extension String {
    func caseInsensitiveEquals(_ other: String) -> Bool {
        let a = utf8, b = other.utf8
        guard a.count == b.count else { return false }
        // Native strings are contiguous: compare their bytes without an iterator per byte.
        if let equal = a.withContiguousStorageIfAvailable({ x in b.withContiguousStorageIfAvailable { y in Self.equalIgnoringCase(x, y) } }) ?? nil {
            return equal
        }
        return zip(a, b).allSatisfy { x, y in x == y || (x | 0x20 == y | 0x20 && (x | 0x20) >= 97 && (x | 0x20) <= 122) }
    }

    private static func equalIgnoringCase(_ a: UnsafeBufferPointer<UInt8>, _ b: UnsafeBufferPointer<UInt8>) -> Bool {
        for index in 0..<a.count {
            let x = a[index], y = b[index]
            if x == y { continue }
            let lower = x | 0x20
            guard lower == y | 0x20, lower >= 97, lower <= 122 else { return false }
        }
        return true
    }
}
