import JSON

/// JSON's stream tokenizer over an import's byte source, and the walk every JSON format shares:
/// the document is an object whose interesting members are arrays (`locations`, `timelineObjects`,
/// `semanticSegments` and `rawSignals`, ...), or (where a format allows) an array itself; the
/// elements of those arrays are handed out one at a time and every other member is skipped
/// unread. Memory is the tokenizer's buffer, whatever the file's size.
final class JSONElements {
    let reader: JSONStreamReader
    private let arrayKeys: [StaticString]
    private let acceptsTopLevelArray: Bool
    private var phase = Phase.start

    /// A top-level array's elements come with `array` nil; otherwise `array` indexes `arrayKeys`.
    struct Element {
        var array: Int?
        var first: JSONStreamReader.Token
    }

    private enum Phase {
        case start, topObject
        case inArray(Int?)
        case done
    }

    /// One element read as a tree may be this long in the file (a timeline segment, a feature).
    static let elementBytesMax = 16 * 1024 * 1024

    init<Source: ByteSource>(_ source: Source, arrayKeys: [StaticString], acceptsTopLevelArray: Bool = false)
    {
        let box = SourceBox(source)
        reader = JSONStreamReader { (buffer) throws(JSONStreamError) -> Int in
            do throws(ImportError) {
                return try box.source.read(into: buffer)
            } catch {
                throw JSONStreamError(code: .inputFailed, byteOffset: 0, message: error.message)
            }
        }
        self.arrayKeys = arrayKeys
        self.acceptsTopLevelArray = acceptsTopLevelArray
    }

    /// The next element of an array of interest (its first token read), or nil at the document's end.
    func next() throws(ImportError) -> Element? {
        while true {
            switch phase {
            case .done:
                return nil
            case .start:
                switch try token() {
                case .objectStart: phase = .topObject
                case .arrayStart where acceptsTopLevelArray: phase = .inArray(nil)
                default: throw here("expected a JSON object at the top of the file")
                }
            case .topObject:
                switch try token() {
                case .key:
                    if let array = arrayKeys.firstIndex(where: { reader.stringEquals($0) }) {
                        guard try token() == .arrayStart else {
                            throw here("\"\(arrayKeys[array])\" must be an array")
                        }
                        phase = .inArray(array)
                    } else {
                        try skipValue()
                    }
                case _:
                    try finish()
                }
            case .inArray(let array):
                let first = try token()
                if first == .arrayEnd {
                    if array == nil { try finish() } else { phase = .topObject }
                    continue
                }
                return Element(array: array, first: first)
            }
        }
    }

    private func finish() throws(ImportError) {
        guard try token() == .end else { throw here("unexpected content after the document") }
        phase = .done
    }

    func token() throws(ImportError) -> JSONStreamReader.Token {
        do {
            return try reader.next()
        } catch {
            throw ImportError(error)
        }
    }

    func skipValue() throws(ImportError) {
        do {
            try reader.skipValue()
        } catch {
            throw ImportError(error)
        }
    }

    /// The rest of the element whose first token is `first`, as a tree.
    func tree(_ first: JSONStreamReader.Token) throws(ImportError) -> JSONValue {
        switch first {
        case .string: return .string(reader.string)
        case .number: return .double(reader.number)
        case .bool: return .bool(reader.bool)
        case .null: return .null
        case .objectStart, .arrayStart:
            // A value whose first token is read: read the members or elements that follow it.
            var members: [JSONObject.Member] = []
            var elements: [JSONValue] = []
            let isObject = first == .objectStart
            while true {
                let token = try token()
                if token == .objectEnd || token == .arrayEnd { break }
                if isObject {
                    let key = reader.string
                    do {
                        members.append(
                            .init(key: key, value: try reader.readValue(bytesMax: Self.elementBytesMax)))
                    } catch {
                        throw ImportError(error)
                    }
                } else {
                    elements.append(try tree(token))
                }
            }
            return isObject ? .object(JSONObject(members)) : .array(elements)
        case .key, .objectEnd, .arrayEnd, .end:
            preconditionFailure("tree called without a value's first token")
        }
    }

    /// An error at the last token.
    func here(_ message: String) -> ImportError {
        ImportError(message, byteOffset: reader.tokenOffset)
    }
}

/// A byte source the tokenizer's refill closure reads through (it is a value type: one box, one
/// reader).
private final class SourceBox<Source: ByteSource> {
    var source: Source
    init(_ source: Source) { self.source = source }
}

extension ImportError {
    init(_ error: JSONStreamError) {
        if error.code == .inputFailed {
            self.init(error.message)
        } else {
            self.init("not valid JSON: \(error.message)", byteOffset: error.byteOffset)
        }
    }
}
