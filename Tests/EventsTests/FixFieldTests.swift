import Events
import Testing

/// The one list of fix field names: what a device sends and what the read API writes; the
/// projection's columns (ProjectionSchema.FixColumn) carry the same names, checked in ProjectorTests.
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
}
