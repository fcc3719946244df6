import CXML2

#if canImport(Glibc)
    import Glibc
#endif

/// One start tag, text or end tag that libxml2's SAX2 callbacks queued for `XMLPullReader`. The
/// words come first and the bytes last, so that a record is copied in aligned moves.
struct XMLEventRecord {
    /// The element's local name and namespace URI, from the parser's dictionary, which lives as
    /// long as the parser: an end tag carries its start tag's, as does its text none.
    var name: UnsafePointer<UInt8>?
    var namespace: UnsafePointer<UInt8>?
    /// A start or end tag's line is its start tag's; a text's is where it began.
    var line: Int
    /// A text's bytes in the arena.
    var textStart: Int
    var textCount = 0
    /// A start tag's attributes without a namespace, in `XMLSAXEvents.attributes`.
    var attributeStart: Int
    var attributeCount: Int
    var event: XMLPullReader.Event
    /// Text from a CDATA section: never merged with the text around it nor passed over as blank.
    var isCDATA: Bool

    init(
        event: XMLPullReader.Event, isCDATA: Bool = false, name: UnsafePointer<UInt8>? = nil,
        namespace: UnsafePointer<UInt8>? = nil, line: Int, textStart: Int = 0, attributeStart: Int = 0,
        attributeCount: Int = 0
    ) {
        self.name = name
        self.namespace = namespace
        self.line = line
        self.textStart = textStart
        self.attributeStart = attributeStart
        self.attributeCount = attributeCount
        self.event = event
        self.isCDATA = isCDATA
    }
}

struct XMLAttributeRecord {
    let name: UnsafePointer<UInt8>
    let valueStart: Int
    let valueCount: Int
}

/// The events of the chunks parsed so far and not yet handed out. The SAX callbacks reach it
/// through the parser context's `_private`, and only from the document's own parser: libxml2 checks
/// a declared entity by parsing its text with a parser of its own and the same callbacks, whose
/// events are not the document's (an entity reference is passed over, never substituted).
final class XMLSAXEvents {
    /// libxml2's limit on a text node that it builds (XML_MAX_TEXT_LENGTH): no longer text is
    /// gathered here either.
    static let textBytesMax = 10_000_000
    /// What references to declared entities may make libxml2 parse again, over the whole document:
    /// without a tree to keep a checked entity's content, SAX parses it at every reference, so a
    /// large entity referenced many times ("quadratic blowup") would cost its size times the
    /// references.
    static let entityBytesMax = 10_000_000

    @exclusivity(unchecked) var context: xmlParserCtxtPtr?
    let errors = XMLErrorCapture()
    @exclusivity(unchecked) private(set) var records: [XMLEventRecord] = []
    @exclusivity(unchecked) private(set) var attributes: [XMLAttributeRecord] = []
    let arena = XMLByteArena()
    @exclusivity(unchecked) private var openLines: [Int] = []
    @exclusivity(unchecked) private var entityBytes = 0
    /// The parser was stopped here (a text or entity over its limit), the reason in `errors`.
    @exclusivity(unchecked) private(set) var stopped = false

    init() {
        records.reserveCapacity(4096)
        attributes.reserveCapacity(1024)
    }

    /// The events of the document's own parser; nil for an entity's check.
    static func of(_ context: UnsafeMutableRawPointer?) -> XMLSAXEvents? {
        guard let context else { return nil }
        let parser = context.assumingMemoryBound(to: xmlParserCtxt.self)
        guard let owner = parser.pointee._private else { return nil }
        let events = Unmanaged<XMLSAXEvents>.fromOpaque(owner).takeUnretainedValue()
        return events.context == parser ? events : nil
    }

    /// The events whatever the parser (the document's or an entity check's).
    static func shared(_ context: UnsafeMutableRawPointer?) -> XMLSAXEvents? {
        guard let context else { return nil }
        let parser = context.assumingMemoryBound(to: xmlParserCtxt.self)
        guard let owner = parser.pointee._private else { return nil }
        return Unmanaged<XMLSAXEvents>.fromOpaque(owner).takeUnretainedValue()
    }

    private var parserLine: Int {
        guard let input = context?.pointee.input else { return 0 }
        return Int(input.pointee.line)
    }

    /// The last record is text that more characters may still extend.
    var endsWithOpenText: Bool {
        guard let last = records.last else { return false }
        return last.event == .text && !last.isCDATA
    }

    func start(
        _ name: UnsafePointer<UInt8>?, _ namespace: UnsafePointer<UInt8>?, _ count: Int,
        _ values: UnsafeMutablePointer<UnsafePointer<UInt8>?>?
    ) {
        closeText()
        let line = parserLine
        openLines.append(line)
        let first = attributes.count
        if let values {
            for index in 0..<count {
                // localname, prefix, URI, value, end: an attribute in a namespace is not wanted.
                let base = index * 5
                guard values[base + 2] == nil, let local = values[base], let value = values[base + 3],
                    let end = values[base + 4]
                else { continue }
                let start = arena.count
                arena.appendAttributeValue(value, count: end - value)
                attributes.append(
                    XMLAttributeRecord(name: local, valueStart: start, valueCount: arena.count - start))
            }
        }
        records.append(
            XMLEventRecord(
                event: .start, name: name, namespace: namespace, line: line,
                attributeStart: first, attributeCount: attributes.count - first))
    }

    func end(_ name: UnsafePointer<UInt8>?, _ namespace: UnsafePointer<UInt8>?) {
        closeText()
        let line = openLines.popLast() ?? parserLine
        records.append(XMLEventRecord(event: .end, name: name, namespace: namespace, line: line))
    }

    func characters(_ bytes: UnsafePointer<UInt8>?, _ count: Int, isCDATA: Bool) {
        guard let bytes, count > 0 else { return }
        if isCDATA || !endsWithOpenText {
            closeText()
            records.append(
                XMLEventRecord(event: .text, isCDATA: isCDATA, line: parserLine, textStart: arena.count))
        }
        guard records[records.count - 1].textCount + count <= Self.textBytesMax else {
            return stop("a text of more than \(Self.textBytesMax) bytes")
        }
        arena.append(bytes, count: count)
        records[records.count - 1].textCount += count
    }

    /// Counts what an entity reference makes libxml2 parse; false (and the parser stopped) past
    /// the limit.
    func entityReferenced(_ entity: xmlEntityPtr) -> Bool {
        guard entity.pointee.etype == XML_INTERNAL_GENERAL_ENTITY else { return true }
        entityBytes += Int(entity.pointee.length)
        guard entityBytes <= Self.entityBytesMax else {
            stop("entity references that expand to more than \(Self.entityBytesMax) bytes")
            return false
        }
        return true
    }

    private func stop(_ message: String) {
        if errors.message == nil {
            errors.message = message
            errors.line = parserLine
        }
        stopped = true
        if let context { xmlStopParser(context) }
    }

    /// Ends the text being gathered: text of whitespace only between elements is passed over, as
    /// xmlTextReader calls it (insignificant) whitespace.
    func closeText() {
        guard endsWithOpenText else { return }
        let last = records[records.count - 1]
        guard arena.isBlank(from: last.textStart, count: last.textCount) else { return }
        records.removeLast()
        arena.truncate(to: last.textStart)
    }

    /// Drops the records before `index`, all handed out; an open text after them is kept.
    func removeHandedOut(before index: Int) {
        if index < records.count, endsWithOpenText, index == records.count - 1 {
            var text = records[index]
            arena.moveToStart(from: text.textStart, count: text.textCount)
            text.textStart = 0
            records.removeAll(keepingCapacity: true)
            records.append(text)
        } else {
            records.removeAll(keepingCapacity: true)
            arena.truncate(to: 0)
        }
        attributes.removeAll(keepingCapacity: true)
    }
}

/// Bytes that stay where they are until the reader asks for more events (a text handed out points
/// into them).
final class XMLByteArena {
    @exclusivity(unchecked) private(set) var base: UnsafeMutablePointer<UInt8>
    @exclusivity(unchecked) private var capacity = 1 << 17
    @exclusivity(unchecked) private(set) var count = 0

    init() { base = .allocate(capacity: 1 << 17) }

    deinit { base.deallocate() }

    private func reserve(_ more: Int) {
        guard count + more > capacity else { return }
        var grown = capacity * 2
        while grown < count + more { grown *= 2 }
        let moved = UnsafeMutablePointer<UInt8>.allocate(capacity: grown)
        moved.update(from: base, count: count)
        base.deallocate()
        base = moved
        capacity = grown
    }

    func append(_ bytes: UnsafePointer<UInt8>, count more: Int) {
        reserve(more)
        (base + count).update(from: bytes, count: more)
        count += more
    }

    /// An attribute value as libxml2 hands it to SAX without entity substitution: a `&` written
    /// `&amp;` or `&#38;` comes as `&#38;`, which is turned back into `&`.
    func appendAttributeValue(_ bytes: UnsafePointer<UInt8>, count length: Int) {
        reserve(length)
        let escaped: [UInt8] = Array("&#38;".utf8)
        var index = 0
        while index < length {
            var isEscape = index + escaped.count <= length
            if isEscape {
                for offset in 0..<escaped.count where bytes[index + offset] != escaped[offset] {
                    isEscape = false
                    break
                }
            }
            base[count] = bytes[index]
            count += 1
            index += isEscape ? escaped.count : 1
        }
    }

    func truncate(to length: Int) { count = min(count, length) }

    func moveToStart(from start: Int, count length: Int) {
        if start > 0 { memmove(base, base + start, length) }
        count = length
    }

    func isBlank(from start: Int, count length: Int) -> Bool {
        for index in start..<(start + length) where !XMLValues.isSpace(base[index]) { return false }
        return true
    }

    func buffer(from start: Int, count length: Int) -> UnsafeBufferPointer<UInt8> {
        UnsafeBufferPointer(start: base + start, count: length)
    }
}
