import Events
import Testing

/// `user_setting_changed` (type 33, docs/log-format.md): its payload layout and its round trip.
@Suite struct SettingEventTests {
    @Test func aSettingChangeRoundTripsWithTheDocumentedLayout() throws {
        let event = Event.userSettingChanged(
            UserSettingChanged(userID: 7, name: UserSettingChanged.owntracksFriends, value: "true"))
        let encoded = EventCodec.encode(event, receivedAtMicros: 1_764_684_400_000_000)
        #expect(encoded.header.type == 33 && EventType(rawValue: 33)?.name == "user_setting_changed")
        #expect(encoded.header.deviceKey == 0)
        #expect(try EventCodec.decode(header: encoded.header, stored: encoded.payload) == event)
        // u64 user, then name and value as strings (u16 length + UTF-8), uncompressed.
        var expected = ByteWriter(capacity: 64)
        expected.u64(7)
        expected.string("owntracks_friends")
        expected.string("true")
        #expect(encoded.header.codec == Codec.none.rawValue && encoded.payload == expected.bytes)

        // A byte more is a damaged record, not a newer field silently read.
        var longer = encoded
        longer.payload.append(0)
        longer.header.uncompressedBytes += 1
        #expect(throws: (any Error).self) {
            try EventCodec.decode(header: longer.header, stored: longer.payload)
        }
    }
}
