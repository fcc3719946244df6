import Events
import Identity
import Ingest
import Testing

/// `in_reply_to` (docs/api.md): a batch names the command it answers; anything but a UUID string
/// fails the request as any bad envelope member does.
@Suite struct InReplyToTests {
    let fix =
        "{\"latitude\": 52.52, \"longitude\": 13.405, \"accuracy_m\": 12, \"source\": \"ondemand\", \"recorded_at\": \"2026-12-02T13:59:00Z\"}"

    func decode(_ member: String) throws(APIError) -> DecodedReport {
        let body =
            "{\"batch_id\": \"1b4e28ba-2fa1-11d2-883f-0016d3cca427\", \(member)\"fixes\": [\(fix)]}"
        return try ReportDecoder.decode(
            Array(body.utf8), receivedAtMicros: 1_796_220_000_000_000, limits: IngestLimits())
    }

    @Test func aCommandIDIsKeptAndTheFixesAreTheSame() throws {
        let id = "3d1e6c1a-8f0b-4d5e-9a7c-2b4f6e8d0a1c"
        let answering = try decode("\"in_reply_to\": \"\(id)\", ")
        let plain = try decode("")
        #expect(answering.inReplyTo == UUID128(id) && plain.inReplyTo == nil)
        #expect(answering.fixes == plain.fixes && answering.fixes.count == 1)
    }

    @Test(arguments: ["42", "\"not-a-uuid\"", "null", "[]"])
    func anythingButAUUIDStringFailsTheRequest(_ value: String) {
        #expect(throws: APIError.self) { try decode("\"in_reply_to\": \(value), ") }
        do {
            _ = try decode("\"in_reply_to\": \(value), ")
        } catch {
            #expect(error.status == 400 && error.code == .invalidField)
        }
    }
}
