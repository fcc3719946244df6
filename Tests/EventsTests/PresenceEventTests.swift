import Events
import Testing

/// `device_presence_linked` and `presence_changed` (types 34 and 35, docs/log-format.md): payload
/// layouts, round trips, and the header's recorded range that retention reads without decoding.
@Suite struct PresenceEventTests {
    @Test func aLinkRoundTripsWithTheDocumentedLayout() throws {
        let event = Event.devicePresenceLinked(
            DevicePresenceLinked(deviceID: 9, userID: 3, nodeID: "12", nodeName: "alice-laptop"))
        let encoded = EventCodec.encode(event, receivedAtMicros: 1_764_684_400_000_000)
        #expect(encoded.header.type == 34 && EventType(rawValue: 34)?.name == "device_presence_linked")
        #expect(encoded.header.deviceKey == 9)
        #expect(encoded.header.recordedMinMicros == 0 && encoded.header.recordedMaxMicros == 0)
        #expect(try EventCodec.decode(header: encoded.header, stored: encoded.payload) == event)
        var expected = ByteWriter(capacity: 64)
        expected.u64(9)
        expected.u64(3)
        expected.string("12")
        expected.string("alice-laptop")
        #expect(encoded.header.codec == Codec.none.rawValue && encoded.payload == expected.bytes)
    }

    @Test func aChangeRoundTripsAndCarriesItsTimeInTheHeader() throws {
        let seen: Int64 = 1_764_600_000_000_000
        let observed: Int64 = 1_764_684_400_000_000
        for (online, lastSeen, happened) in [
            (false, Optional(seen), seen), (false, nil, observed), (true, Optional(seen), observed),
            // A lastSeen ahead of the server's clock counts from the observation.
            (false, Optional(observed + 5_000_000), observed),
        ] as [(Bool, Int64?, Int64)] {
            let event = Event.presenceChanged(
                PresenceChanged(
                    deviceID: 9, nodeID: "12", online: online, lastSeenMicros: lastSeen,
                    observedAtMicros: observed))
            let encoded = EventCodec.encode(event, receivedAtMicros: observed + 1)
            #expect(encoded.header.type == 35 && EventType(rawValue: 35)?.name == "presence_changed")
            #expect(encoded.header.deviceKey == 9)
            #expect(
                encoded.header.recordedMinMicros == happened && encoded.header.recordedMaxMicros == happened)
            #expect(try EventCodec.decode(header: encoded.header, stored: encoded.payload) == event)
            // u64 device, node id, u8 online, u8 has-lastSeen, i64 lastSeen (0 without), i64 observed.
            var expected = ByteWriter(capacity: 64)
            expected.u64(9)
            expected.string("12")
            expected.u8(online ? 1 : 0)
            expected.u8(lastSeen == nil ? 0 : 1)
            expected.i64(lastSeen ?? 0)
            expected.i64(observed)
            #expect(encoded.payload == expected.bytes)
            var bad = encoded
            bad.payload[8 + 2 + 2] = 2  // an online flag of 2
            #expect(throws: (any Error).self) {
                try EventCodec.decode(header: bad.header, stored: bad.payload)
            }
        }
    }
}
