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

/// Field names are ASCII; comparing bytes avoids allocating two lowercased copies per lookup. Every
/// request compares each of its field names several times (framing, limits, the gate, the answer's
/// headers), so the bytes are compared in place rather than through two UTF-8 iterators.
func asciiCaseInsensitiveEquals(_ a: String, _ b: String) -> Bool {
    var a = a
    var b = b
    guard a.utf8.count == b.utf8.count else { return false }
    return a.withUTF8 { x in
        b.withUTF8 { y in
            for index in x.indices where x[index] != y[index] {
                let lower = x[index] | 0x20
                guard lower == y[index] | 0x20, lower >= UInt8(ascii: "a"), lower <= UInt8(ascii: "z") else {
                    return false
                }
            }
            return true
        }
    }
}
