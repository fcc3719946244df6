import Events
import Testing

/// The one list of fix field names: what a device sends, what the read API writes and what the
/// projection's columns are called (docs/api.md, docs/postgres.md).
@Test func fixFieldNamesAreTheAPIAndColumnNames() {
    #expect(
        FixField.reported.map(\.rawValue) == [
            "latitude", "longitude", "accuracy_m", "altitude_m", "speed_mps", "heading_deg", "battery_pct",
            "is_charging", "source", "recorded_at",
        ])
    #expect(
        FixField.allCases.map(\.rawValue) == FixField.reported.map(\.rawValue) + [
            "received_at", "clock_suspect",
        ])
    #expect(
        FixField.columns([.latitude, .accuracy, .recordedAt], of: "l")
            == "l.latitude, l.accuracy_m, l.recorded_at")
}
