import CXML2

#if canImport(Glibc)
    import Glibc
#endif

/// XML read as a stream of start tags, text and end tags through libxml2's xmlTextReader, fed
/// from a ByteSource, never built into a tree: memory stays bounded by the deepest element and the
/// longest text, whatever the file's size (libxml2 refuses a text node over 10 MB, since
/// XML_PARSE_HUGE is not set).
///
/// Safe against hostile files: XML_PARSE_NONET (nothing is fetched from the network), and neither
/// XML_PARSE_NOENT (entities are not substituted: a reference to a declared entity is an
/// entity-reference node, which `next()` passes over, so an external entity is never read and a
/// "billion laughs" never expands) nor XML_PARSE_DTDLOAD (an external DTD is not loaded).
///
/// An element written `<a/>` is handed out as a start and then an end, like `<a></a>`. Comments,
/// processing instructions, whitespace between elements and the DOCTYPE are passed over.
final class XMLPullReader {
    enum Event: Equatable { case start, text, end }

    /// XML_PARSE_BIG_LINES: an element's line beyond 65535 is kept, not capped.
    static let options = Int32(
        XML_PARSE_NONET.rawValue | XML_PARSE_COMPACT.rawValue | XML_PARSE_BIG_LINES.rawValue)

    private let reader: xmlTextReaderPtr
    private let input: CallbackInput
    private let errors = XMLErrorCapture()
    private var endOfEmptyElementPending = false

    init(_ input: CallbackInput) throws(ImportError) {
        _ = xmlLibraryInitialised
        self.input = input
        let context = Unmanaged.passUnretained(input).toOpaque()
        guard let reader = xmlReaderForIO(xmlReadFromInput, xmlCloseInput, context, nil, nil, Self.options)
        else {
            throw input.sourceError ?? ImportError("the XML reader cannot start (out of memory?)")
        }
        self.reader = reader
        xmlTextReaderSetStructuredErrorHandler(
            reader, xmlKeepFirstError, Unmanaged.passUnretained(errors).toOpaque())
    }

    deinit { xmlFreeTextReader(reader) }

    /// The next start tag, text or end tag; nil at the end of the document.
    func next() throws(ImportError) -> Event? {
        if endOfEmptyElementPending {
            endOfEmptyElementPending = false
            return .end
        }
        while true {
            let result = xmlTextReaderRead(reader)
            if result == 0 {
                if errors.message != nil { throw failure() }
                return nil
            }
            if result < 0 { throw failure() }
            switch xmlTextReaderNodeType(reader) {
            case Int32(XML_READER_TYPE_ELEMENT.rawValue):
                endOfEmptyElementPending = xmlTextReaderIsEmptyElement(reader) == 1
                return .start
            case Int32(XML_READER_TYPE_END_ELEMENT.rawValue):
                return .end
            case Int32(XML_READER_TYPE_TEXT.rawValue), Int32(XML_READER_TYPE_CDATA.rawValue):
                return .text
            default:
                continue
            }
        }
    }

    /// The current element's name without its prefix.
    func nameIs(_ name: StaticString) -> Bool {
        guard let local = xmlTextReaderConstLocalName(reader) else { return false }
        return equalsCString(local, name)
    }

    var name: String {
        guard let local = xmlTextReaderConstLocalName(reader) else { return "" }
        return String(cString: local)
    }

    /// The current element's namespace URI ("" when it has none).
    func namespaceIs(_ uri: StaticString) -> Bool {
        guard let namespace = xmlTextReaderConstNamespaceUri(reader) else {
            return uri.utf8CodeUnitCount == 0
        }
        return equalsCString(namespace, uri)
    }

    /// The current text node's bytes, valid until the next call of `next()`.
    var text: UnsafeBufferPointer<UInt8> {
        guard let value = xmlTextReaderConstValue(reader) else {
            return UnsafeBufferPointer(start: nil, count: 0)
        }
        return UnsafeBufferPointer(start: value, count: byteCount(value))
    }

    /// The current element's attribute `name` (without a namespace), entities and references
    /// resolved as XML defines; nil when the element has none.
    func attribute(_ name: StaticString) -> [UInt8]? {
        guard let value = xmlTextReaderGetAttribute(reader, name.utf8Start) else { return nil }
        defer { findmy_xml_free(value) }
        return Array(UnsafeBufferPointer(start: value, count: byteCount(value)))
    }

    /// The line of the current element's start tag (1-based), or where the parser has reached.
    var line: Int {
        if let node = xmlTextReaderCurrentNode(reader) {
            let line = xmlGetLineNo(node)
            if line > 0 { return Int(line) }
        }
        return Int(xmlTextReaderGetParserLineNumber(reader))
    }

    /// How far the parser has read: it parses ahead of the node handed out, so this is exact only
    /// where parsing stopped (malformed XML).
    private var parsedBytes: Int64? {
        let consumed = xmlTextReaderByteConsumed(reader)
        return consumed >= 0 ? Int64(consumed) : nil
    }

    /// An error about the current element (a value findmy cannot read), naming its line: the
    /// parser's byte position is ahead of it, so it is not given.
    func error(_ message: String) -> ImportError {
        ImportError(message, line: line)
    }

    private func failure() -> ImportError {
        if let sourceError = input.sourceError { return sourceError }
        // libxml2 says "Extra content at the end of the document" of an empty file.
        if input.bytesRead == 0 { return ImportError("the file is empty") }
        let message = errors.message ?? "the XML cannot be read"
        return ImportError(
            "malformed XML: \(message)", byteOffset: parsedBytes,
            line: errors.line ?? Int(xmlTextReaderGetParserLineNumber(reader)))
    }
}

/// libxml2 asks to be initialised once, before readers run on several threads (imports from the
/// API and the CLI at once); a global is initialised once, on first use, whatever the thread.
private let xmlLibraryInitialised: Void = xmlInitParser()

/// libxml2's first error for this reader (later ones are usually its consequences).
final class XMLErrorCapture {
    var message: String?
    var line: Int?
}

private func xmlReadFromInput(
    _ context: UnsafeMutableRawPointer?, _ buffer: UnsafeMutablePointer<CChar>?, _ length: Int32
) -> Int32 {
    guard let context, let buffer, length > 0 else { return -1 }
    let input = Unmanaged<CallbackInput>.fromOpaque(context).takeUnretainedValue()
    return Int32(input.fillForC(UnsafeMutableRawBufferPointer(start: buffer, count: Int(length))))
}

/// The source belongs to the Swift reader, which closes it: nothing to do here.
private func xmlCloseInput(_ context: UnsafeMutableRawPointer?) -> Int32 { 0 }

private func xmlKeepFirstError(_ context: UnsafeMutableRawPointer?, _ error: xmlErrorPtr?) {
    guard let context, let error else { return }
    let capture = Unmanaged<XMLErrorCapture>.fromOpaque(context).takeUnretainedValue()
    guard capture.message == nil, error.pointee.level.rawValue >= XML_ERR_ERROR.rawValue else { return }
    var message = error.pointee.message.map { String(cString: $0) } ?? "unknown error"
    while message.last?.isWhitespace == true { message.removeLast() }
    capture.message = message
    capture.line = error.pointee.line > 0 ? Int(error.pointee.line) : nil
}

private func byteCount(_ string: UnsafePointer<UInt8>) -> Int {
    string.withMemoryRebound(to: CChar.self, capacity: 1) { strlen($0) }
}

/// A NUL-terminated string from libxml2 equals `expected`, byte for byte.
private func equalsCString(_ string: UnsafePointer<UInt8>, _ expected: StaticString) -> Bool {
    let count = expected.utf8CodeUnitCount
    let bytes = expected.utf8Start
    for index in 0..<count where string[index] != bytes[index] { return false }
    return string[count] == 0
}
