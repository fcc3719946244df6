import CXML2

/// XML read as a stream of start tags, text and end tags through libxml2's SAX2 push parser, fed
/// 64 KiB at a time from a ByteSource, never built into a tree: the callbacks queue the events of
/// one chunk, which `next()` hands out before parsing the next. Memory stays bounded by a chunk's
/// events and the longest text (a text over `XMLSAXEvents.textBytesMax` is an error, as libxml2
/// refuses such a text node since XML_PARSE_HUGE is not set).
///
/// Safe against hostile files: XML_PARSE_NONET (nothing is fetched from the network), and neither
/// XML_PARSE_NOENT (entities are not substituted: a reference to a declared entity is passed over,
/// so an external entity is never read; libxml2 checks an internal entity's text once and refuses a
/// "billion laughs") nor XML_PARSE_DTDLOAD (an external DTD is not loaded; no externalSubset
/// handler either). Entity declarations are kept by libxml2's own SAX2 handlers, so that a
/// reference to one is checked, not an error; what references make libxml2 parse again is bounded
/// by `XMLSAXEvents.entityBytesMax`.
///
/// An element written `<a/>` is handed out as a start and then an end, like `<a></a>`. Comments,
/// processing instructions, whitespace between elements and the DOCTYPE are passed over.
final class XMLPullReader {
    enum Event: Equatable { case start, text, end }

    /// XML_PARSE_BIG_LINES: an element's line beyond 65535 is kept, not capped.
    static let options = Int32(
        XML_PARSE_NONET.rawValue | XML_PARSE_COMPACT.rawValue | XML_PARSE_BIG_LINES.rawValue)
    static let chunkBytes = 1 << 16

    private let parser: xmlParserCtxtPtr
    private let input: CallbackInput
    private let events = XMLSAXEvents()
    private let chunk = UnsafeMutableRawBufferPointer.allocate(byteCount: chunkBytes, alignment: 1)
    /// The next record to hand out, and the end of those that can be (an open text cannot).
    @exclusivity(unchecked) private var position = 0
    @exclusivity(unchecked) private var available = 0
    /// The record handed out last (nil before the first and while parsing).
    @exclusivity(unchecked) private var record: XMLEventRecord?
    @exclusivity(unchecked) private var finished = false
    @exclusivity(unchecked) private var pendingFailure: ImportError?

    init(_ input: CallbackInput) throws(ImportError) {
        if let failure = xmlLibraryFailure {
            chunk.deallocate()
            throw ImportError(failure)
        }
        self.input = input
        // The first bytes tell libxml2 the encoding (a byte order mark, UTF-16); nothing is parsed
        // before the events are attached to the parser.
        let first = input.fillForC(UnsafeMutableRawBufferPointer(rebasing: chunk[0..<4]))
        var handler = makeSAXHandler()
        let parser = chunk.withMemoryRebound(to: CChar.self) { bytes in
            xmlCreatePushParserCtxt(&handler, nil, bytes.baseAddress, Int32(max(first, 0)), nil)
        }
        guard first >= 0, let parser else {
            chunk.deallocate()
            if let parser { xmlFreeParserCtxt(parser) }
            throw input.sourceError ?? ImportError("the XML parser cannot start (out of memory?)")
        }
        self.parser = parser
        _ = xmlCtxtUseOptions(parser, Self.options)
        events.context = parser
        parser.pointee._private = Unmanaged.passUnretained(events).toOpaque()
    }

    deinit {
        if let document = parser.pointee.myDoc { xmlFreeDoc(document) }
        parser.pointee.myDoc = nil
        xmlFreeParserCtxt(parser)
        chunk.deallocate()
    }

    /// The next start tag, text or end tag; nil at the end of the document.
    func next() throws(ImportError) -> Event? {
        while true {
            if position < available {
                let handedOut = events.records[position]
                record = handedOut
                position += 1
                return handedOut.event
            }
            if let pendingFailure { throw pendingFailure }
            if finished { return nil }
            record = nil
            events.removeHandedOut(before: position)
            position = 0
            available = 0
            try parseChunk()
            available = events.records.count - (!finished && events.endsWithOpenText ? 1 : 0)
        }
    }

    private func parseChunk() throws(ImportError) {
        let count = input.fillForC(chunk)
        if count < 0 { throw failure() }
        let terminate: Int32 = count == 0 ? 1 : 0
        _ = chunk.withMemoryRebound(to: CChar.self) { bytes in
            xmlParseChunk(parser, count == 0 ? nil : bytes.baseAddress, Int32(count), terminate)
        }
        if events.stopped || parser.pointee.wellFormed == 0 {
            finished = true
            pendingFailure = failure()
        } else if count == 0 {
            finished = true
            events.closeText()
            if events.errors.message != nil { pendingFailure = failure() }
        }
    }

    /// The current element's name without its prefix.
    func nameIs(_ name: StaticString) -> Bool {
        guard let local = record?.name else { return false }
        return equalsCString(local, name)
    }

    var name: String {
        guard let local = record?.name else { return "" }
        return String(cString: local)
    }

    /// The current element's namespace URI ("" when it has none).
    func namespaceIs(_ uri: StaticString) -> Bool {
        guard let namespace = record?.namespace else { return uri.utf8CodeUnitCount == 0 }
        return equalsCString(namespace, uri)
    }

    /// The current text's bytes, valid until the next call of `next()`.
    var text: UnsafeBufferPointer<UInt8> {
        guard let record, record.event == .text else { return UnsafeBufferPointer(start: nil, count: 0) }
        return events.arena.buffer(from: record.textStart, count: record.textCount)
    }

    /// The current element's attribute `name` (without a namespace), character references resolved
    /// as XML defines (a declared entity is not substituted); nil when the element has none.
    func attribute(_ name: StaticString) -> [UInt8]? {
        guard let record, record.event == .start else { return nil }
        for index in record.attributeStart..<(record.attributeStart + record.attributeCount) {
            let attribute = events.attributes[index]
            if equalsCString(attribute.name, name) {
                return Array(events.arena.buffer(from: attribute.valueStart, count: attribute.valueCount))
            }
        }
        return nil
    }

    /// The line of the current element's start tag (1-based), or where the parser has reached.
    var line: Int {
        if let line = record?.line, line > 0 { return line }
        return Int(parser.pointee.input?.pointee.line ?? 0)
    }

    /// An error about the current element (a value findmy cannot read), naming its line: the
    /// parser's byte position is ahead of it, so it is not given.
    func error(_ message: String) -> ImportError {
        ImportError(message, line: line)
    }

    /// How far the parser has read: exact only where parsing stopped (malformed XML).
    private func failure() -> ImportError {
        if let sourceError = input.sourceError { return sourceError }
        // libxml2 says "Document is empty" or "Extra content at the end of the document" of an
        // empty file.
        if input.bytesRead == 0 { return ImportError("the file is empty") }
        let message = events.errors.message ?? "the XML cannot be read"
        let consumed = xmlByteConsumed(parser)
        return ImportError(
            "malformed XML: \(message)", byteOffset: consumed >= 0 ? Int64(consumed) : nil,
            line: events.errors.line ?? Int(parser.pointee.input?.pointee.line ?? 0))
    }
}

/// libxml2 is loaded with the first XML import, not at start (CXML2's shim.h): nil when it was, else
/// why not (naming the library), the import's error. It asks to be initialised once, before readers
/// run on several threads (imports from the API and the CLI at once); a global is initialised once,
/// on first use, whatever the thread.
private let xmlLibraryFailure: String? = {
    if let failure = findmy_xml2_load() { return String(cString: failure) }
    xmlInitParser()
    return nil
}()

/// libxml2's first error for this reader (later ones are usually its consequences).
final class XMLErrorCapture {
    var message: String?
    var line: Int?
}

func xmlKeepFirstError(_ context: UnsafeMutableRawPointer?, _ error: xmlErrorPtr?) {
    guard let error, let capture = XMLSAXEvents.shared(context)?.errors else { return }
    guard capture.message == nil, error.pointee.level.rawValue >= XML_ERR_ERROR.rawValue else { return }
    var message = error.pointee.message.map { String(cString: $0) } ?? "unknown error"
    while message.last?.isWhitespace == true { message.removeLast() }
    capture.message = message
    capture.line = error.pointee.line > 0 ? Int(error.pointee.line) : nil
}

/// A NUL-terminated string from libxml2 equals `expected`, byte for byte.
private func equalsCString(_ string: UnsafePointer<UInt8>, _ expected: StaticString) -> Bool {
    let count = expected.utf8CodeUnitCount
    let bytes = expected.utf8Start
    for index in 0..<count where string[index] != bytes[index] { return false }
    return string[count] == 0
}
