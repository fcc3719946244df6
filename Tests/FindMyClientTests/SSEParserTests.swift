import FindMyClient
import Testing

/// The parser against the standard's examples and the command stream's own shape, fed whole, one
/// byte at a time and in every two-piece split: the same events each way.
@Suite struct SSEParserTests {
    static let stream = Array(
        """
        retry: 5000

        event: ready
        data: {"open":["a"]}

        id: 1234
        event: command
        data: {"command_id":"a","kind":"sound"}

        : heartbeat

        event: ended
        data: {"command_id":"a","state":"expired","reason":"no answer within 3600 s"}


        """.utf8)

    static let expected = [
        SSEEvent(type: "ready", data: "{\"open\":[\"a\"]}", lastEventID: nil),
        SSEEvent(type: "command", data: "{\"command_id\":\"a\",\"kind\":\"sound\"}", lastEventID: "1234"),
        SSEEvent(
            type: "ended",
            data: "{\"command_id\":\"a\",\"state\":\"expired\",\"reason\":\"no answer within 3600 s\"}",
            lastEventID: "1234"),
    ]

    func parse(_ pieces: [[UInt8]]) throws -> (events: [SSEEvent], parser: SSEParser) {
        var parser = SSEParser()
        var events: [SSEEvent] = []
        for piece in pieces { events += try parser.feed(piece) }
        return (events, parser)
    }

    @Test func theCommandStreamReadsTheSameWholeByteByByteAndInEverySplit() throws {
        let whole = try parse([Self.stream])
        #expect(whole.events == Self.expected)
        #expect(whole.parser.retryMillis == 5000)
        #expect(whole.parser.lastEventID == "1234")
        #expect(try parse(Self.stream.map { [$0] }).events == Self.expected)
        for split in 0...Self.stream.count {
            let pieces = [Array(Self.stream[..<split]), Array(Self.stream[split...])]
            #expect(try parse(pieces).events == Self.expected, "split at \(split)")
        }
    }

    @Test func crLfAndCrEndLinesToo() throws {
        let text = "event: command\r\ndata: x\r\n\r\nevent: ended\rdata: y\r\r"
        let expected = [
            SSEEvent(type: "command", data: "x", lastEventID: nil),
            SSEEvent(type: "ended", data: "y", lastEventID: nil),
        ]
        #expect(try parse([Array(text.utf8)]).events == expected)
        #expect(try parse(Array(text.utf8).map { [$0] }).events == expected)
    }

    @Test func theStandardsFieldRules() throws {
        // Data lines joined by LF; no space after the colon kept as is; a field without a colon;
        // a BOM at the start; an unknown field; a retry that is not digits ignored; no data, no event.
        let text =
            "\u{FEFF}data: first\ndata:second\ndata\nunknown: x\nretry: 5s\n\nevent: lonely\n\nid\ndata: z\n\n"
        let result = try parse([Array(text.utf8)])
        #expect(
            result.events == [
                SSEEvent(type: "message", data: "first\nsecond\n", lastEventID: nil),
                SSEEvent(type: "message", data: "z", lastEventID: ""),
            ])
        #expect(result.parser.retryMillis == nil)
    }

    @Test func anUnfinishedEventIsNotDispatched() throws {
        #expect(try parse([Array("event: command\ndata: x\n".utf8)]).events == [])
    }

    @Test func aLineOverTheLimitIsRefused() {
        var parser = SSEParser(lineBytesMax: 8)
        #expect(throws: SSEParser.Failure.lineTooLong(bytes: 9)) {
            _ = try parser.feed(Array("data: 123456789".utf8))
        }
    }
}
