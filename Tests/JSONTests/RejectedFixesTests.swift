import JSON
import Testing

@Suite struct RejectedFixesTests {
    @Test func writesEachRejectionAsIndexAndReasonInOrder() {
        var writer = JSONWriter(capacity: 64)
        writer.rejectedFixes([
            (index: UInt32(2), reason: "out_of_range"), (index: UInt32(7), reason: "a \"quoted\" one"),
        ])
        #expect(
            String(decoding: writer.bytes, as: UTF8.self)
                == #"[{"index":2,"reason":"out_of_range"},{"index":7,"reason":"a \"quoted\" one"}]"#)
        var empty = JSONWriter(capacity: 8)
        empty.rejectedFixes([])
        #expect(empty.bytes == Array("[]".utf8))
    }
}
