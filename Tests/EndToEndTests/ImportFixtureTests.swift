import Foundation
import JSON
import Testing

/// Every fixture of Fixtures/import through `findmy import` as a user runs it: each whole file of
/// each format is detected from its content, stored to its last fix, and audited; each damaged one
/// fails with the line or byte where it stops being readable and stores nothing (all are smaller
/// than a chunk). The window is wide: the fixtures' fixes are years old.
@Suite(.serialized) struct ImportFixtureTests {
    static let fixtures = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("Fixtures/import")
        .path

    /// A whole file, the format it is detected as, and its fixes (docs/import-export.md per format).
    struct Whole: Sendable, CustomTestStringConvertible {
        var file: String
        var format: String
        var fixes: Int
        var testDescription: String { file }
    }

    static let whole: [Whole] = [
        Whole(file: "csv/history.csv", format: "csv", fixes: 4),
        Whole(file: "csv/semicolon.csv", format: "csv", fixes: 2),
        Whole(file: "csv/semicolon-decimal-comma.csv", format: "csv", fixes: 1),
        Whole(file: "geojson/history.geojson", format: "geojson", fixes: 3),
        Whole(file: "geojson/overland.json", format: "geojson", fixes: 3),
        Whole(file: "google-records/Records.json", format: "google-records", fixes: 4),
        Whole(file: "google-semantic/2019_MAY.json", format: "google-semantic", fixes: 6),
        Whole(file: "google-timeline/Timeline.json", format: "google-timeline", fixes: 7),
        Whole(file: "google-timeline/location-history.json", format: "google-timeline", fixes: 5),
        Whole(file: "gpx/findmy-extension.gpx", format: "gpx", fixes: 2),
        Whole(file: "gpx/routes-waypoints.gpx", format: "gpx", fixes: 3),
        Whole(file: "gpx/track-1.0.gpx", format: "gpx", fixes: 2),
        Whole(file: "gpx/track-1.1.gpx", format: "gpx", fixes: 3),
        Whole(file: "kml/placemarks.kml", format: "kml", fixes: 2),
        Whole(file: "kml/track.kml", format: "kml", fixes: 4),
        Whole(file: "kmz/track.kmz", format: "kmz", fixes: 4),
        Whole(file: "zip/takeout.zip", format: "zip", fixes: 1),
        Whole(file: "zip/takeout-mixed.zip", format: "zip", fixes: 28),
    ]

    static let damaged = [
        "csv/bad-time.csv", "csv/short-row.csv", "geojson/duplicate-key.geojson",
        "google-records/bad-number.json", "google-records/truncated.json",
        "google-semantic/missing-comma.json",
        "google-timeline/control-character.json", "gpx/bad-latitude.gpx", "gpx/bad-time.gpx",
        "gpx/billion-laughs.gpx", "gpx/truncated.gpx", "gpx/unclosed-tag.gpx", "kml/bad-coordinate.kml",
        "kml/bad-time.kml", "kml/truncated.kml", "kml/uneven-track.kml", "kmz/truncated.kmz",
        "owntracks-recorder/damaged.rec", "owntracks-recorder/not-a-rec-line.rec", "zip/takeout-damaged.zip",
    ]

    func importOne(_ file: String, data: String) throws -> (status: Int32, result: JSONValue, error: String) {
        let run = try FindmyProcess.run([
            "import", "--json", "--data-dir", data, "--user", "jane", "--new-device", "phone",
            "--retention-days", "36500", Self.fixtures + "/" + file,
        ])
        let line = run.output.split(separator: "\n").first.map(String.init) ?? ""
        return (run.status, (try? JSONParser.parse(line)) ?? .null, run.error)
    }

    @Test(arguments: whole) func aWholeFileIsStoredToItsLastFixAndAudited(_ fixture: Whole) throws {
        let data = ScratchDirectory("findmy-import-fixture")
        _ = try addUser("jane", data: data.path)
        let run = try importOne(fixture.file, data: data.path)
        #expect(run.status == 0, "\(run.error)")
        #expect(run.result["state"] == .string("done"), "\(run.result)")
        #expect(run.result["format"] == .string(fixture.format))
        #expect(run.result["fixes_read"] == .integer(Int64(fixture.fixes)), "\(run.result)")
        #expect(run.result["accepted"] == .integer(Int64(fixture.fixes)), "\(run.result)")
        let records = try dumpLog(data.path).records
        let stored = records.filter {
            $0["type"] == .string("fix_batch") && $0["protocol"] == .string("import:" + fixture.format)
        }
        #expect(stored.reduce(0) { $0 + ((try? $1["fixes"]?.arrayValue) ?? []).count } == fixture.fixes)
        let audit = records.filter { $0["type"] == .string("history_imported") }
        #expect(audit.count == 1)
        #expect(audit.first?["file_name"] == .string(String(fixture.file.split(separator: "/").last!)))
        #expect(audit.first?["fixes_accepted"] == .integer(Int64(fixture.fixes)))
    }

    @Test(arguments: damaged) func aDamagedFileFailsNamingWhereAndStoresNothing(_ file: String) throws {
        let data = ScratchDirectory("findmy-import-damaged")
        _ = try addUser("jane", data: data.path)
        let run = try importOne(file, data: data.path)
        #expect(run.status == 1, "\(run.result) \(run.error)")
        #expect(run.result["state"] == .string("failed"), "\(run.result)")
        let error = (try? run.result["error"]?.stringValue) ?? ""
        #expect(error.contains("line ") || error.contains("byte "), "\(error)")
        let records = try dumpLog(data.path).records
        #expect(
            !records.contains {
                $0["type"] == .string("fix_batch") || $0["type"] == .string("history_imported")
            })
    }
}
