import Identity
import Testing

@testable import ReadAPI

/// The cursor of a device's transitions (DeviceTransitions.swift): its keyset (recorded_at, source,
/// row id) comes back unchanged, and a cursor of another listing or device is refused.
@Suite struct DeviceTransitionCursorTests {
    @Test func itsKeysetComesBackUnchanged() throws {
        for source: UInt32 in [0, 1] {
            let cursor = HistoryCursor(
                kind: .deviceTransitions, deviceID: 7, micros: 1_780_000_000_123_456, logOffset: 41,
                fixIndex: source)
            #expect(try HistoryCursor.decode(cursor.encoded, kind: .deviceTransitions, deviceID: 7) == cursor)
        }
    }

    @Test func anotherListingsOrDevicesCursorIsRefused() {
        let mine = HistoryCursor(kind: .deviceTransitions, deviceID: 7, micros: 0, logOffset: 1).encoded
        let fences = HistoryCursor(kind: .geofenceTransitions, deviceID: 7, micros: 0, logOffset: 1).encoded
        for (text, kind, device) in [
            (mine, HistoryCursor.Kind.deviceTransitions, UInt64(8)), (mine, .locations, 7),
            (fences, .deviceTransitions, 7),
        ] {
            #expect(throws: APIError.self) { try HistoryCursor.decode(text, kind: kind, deviceID: device) }
        }
    }
}
