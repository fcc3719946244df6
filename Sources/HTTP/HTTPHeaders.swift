/// Header fields in arrival order. Lookup ignores ASCII case, as HTTP field names do (RFC 9110 §5.1).
public struct HTTPHeaders: Sendable, Sequence {
    public private(set) var fields: [(name: String, value: String)]

    public init(_ fields: [(name: String, value: String)] = []) {
        self.fields = fields
    }

    /// The first value of the field `name`, if present.
    public subscript(name: String) -> String? {
        fields.first { asciiCaseInsensitiveEquals($0.name, name) }?.value
    }

    /// Every value of the field `name`, in arrival order.
    public func values(_ name: String) -> [String] {
        fields.filter { asciiCaseInsensitiveEquals($0.name, name) }.map(\.value)
    }

    public mutating func add(_ name: String, _ value: String) {
        fields.append((name, value))
    }

    /// Replaces every value of `name` with one.
    public mutating func set(_ name: String, _ value: String) {
        fields.removeAll { asciiCaseInsensitiveEquals($0.name, name) }
        fields.append((name, value))
    }

    public func makeIterator() -> IndexingIterator<[(name: String, value: String)]> {
        fields.makeIterator()
    }
}

/// Field names are ASCII; comparing bytes avoids allocating two lowercased copies per lookup.
func asciiCaseInsensitiveEquals(_ a: String, _ b: String) -> Bool {
    let a = a.utf8
    let b = b.utf8
    guard a.count == b.count else { return false }
    return zip(a, b).allSatisfy { x, y in
        x == y || (x | 0x20 == y | 0x20 && (x | 0x20) >= UInt8(ascii: "a") && (x | 0x20) <= UInt8(ascii: "z"))
    }
}
