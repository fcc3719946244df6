import Foundation
import HTTPClient
import JSON
import Postgres
import Testing

/// The embedded PostgreSQL as an operator meets it: `findmy compact` before any projection exists.
@Suite(.serialized) struct EmbeddedClusterTests {
    /// A data directory with a log but no projection (no server with a projector ever ran on it):
    /// compaction has nothing to delete in PostgreSQL, says so and succeeds.
    @Test func compactWithoutAProjectionSucceedsAndSaysSo() throws {
        let scratch = ScratchDirectory()
        let data = scratch.path + "/data"
        _ = try addUser("anna", data: data)
        let compact = try FindmyProcess.run(["compact", "--data-dir", data])
        #expect(compact.status == 0, "\(compact.output)\n\(compact.error)")
        #expect(compact.output.contains("log: removed 0 fixes"), "\(compact.output)")
        #expect(
            compact.output.contains("database: no projection to compact yet"),
            "\(compact.output)\n\(compact.error)")

        let json = try FindmyProcess.run(["compact", "--data-dir", data, "--json"])
        #expect(json.status == 0, "\(json.output)\n\(json.error)")
        let report = try JSONParser.parse(json.output)
        #expect(try report["database"]?["skipped"]?.stringValue.contains("no projection") == true)
        #expect(try report["database"]?["location_rows_deleted"]?.int64Value == 0)
    }
}
