import HTTPClient
import JSON
import Testing

/// Overland's batch id comes from the decoded locations (docs/clients.md, "Resends"): against a
/// real server, a resend of the same locations is answered `{"result":"ok"}` and appends nothing,
/// even when what findmy does not read (`current`, `trip`, whitespace) changed; a changed value is
/// a new batch. Read from the log itself (`findmy log dump`) and from `/metrics`.
@Suite(.serialized) struct OverlandResendTests {
    static func body(battery: String = "0.57", current: String = "10", spaced: Bool = false) -> String {
        let location =
            #"{"type":"Feature","geometry":{"type":"Point","coordinates":[13.4,52.5]},"properties":{"timestamp":"2026-12-01T08:00:00Z","horizontal_accuracy":5,"battery_level":"#
            + battery + "}}"
        let current =
            #"{"type":"Feature","geometry":{"type":"Point","coordinates":[13.5,52.6]},"properties":{"timestamp":"2026-12-01T08:"#
            + current + #":00Z"}}"#
        let separator = spaced ? ", " : ","
        return #"{"locations":["# + location + "]" + separator + #""current":"# + current + separator
            + #""trip":{"distance":"# + current + "}}"
    }

    @Test func aResendOfTheSameLocationsAppendsNothingAndAChangedOneDoes() throws {
        let setup = try OverlandOsmAndTests.Setup(projector: false)
        defer { setup.stop() }
        let device = try setup.device()
        func send(_ body: String) throws -> HTTPClientResponse {
            try setup.connection.send(
                "POST", "/api/find-my/overland",
                headers: [("Authorization", "Bearer \(device.token)"), ("Content-Type", "application/json")],
                body: Array(body.utf8))
        }
        for body in [
            Self.body(), Self.body(), Self.body(current: "20"), Self.body(current: "30", spaced: true),
            Self.body(battery: "0.571"),
        ] {
            let answer = try send(body)
            #expect(answer.status == 200 && answer.bodyText == #"{"result":"ok"}"#, "\(answer.bodyText)")
        }
        // The first request and the one whose battery level changed (both stored as 57 %): two
        // batches; the three resends: duplicates.
        let batches = try OverlandOsmAndBadInputTests.stored(setup.data.path, device: device.id)
        #expect(batches.map(\.latitudes) == [[52.5], [52.5]], "\(batches.map(\.latitudes))")
        let metrics = try setup.connection.send("GET", "/metrics").bodyText
        #expect(OverlandOsmAndTests.metric(metrics, "findmy_duplicate_batches_total") == 3)
    }
}
