import Events
import Testing

/// `found_notice_set` (type 42, docs/log-format.md): its payload layout and its round trip.
@Suite struct FoundNoticeEventTests {
    @Test(arguments: [true, false])
    func aFoundNoticeRoundTripsWithTheDocumentedLayout(armed: Bool) throws {
        let event = Event.foundNoticeSet(FoundNoticeSet(deviceID: 9, userID: 4, armed: armed))
        let encoded = EventCodec.encode(event, receivedAtMicros: 1_764_684_400_000_000)
        #expect(encoded.header.type == 42 && EventType(rawValue: 42)?.name == "found_notice_set")
        #expect(encoded.header.deviceKey == 9)
        #expect(try EventCodec.decode(header: encoded.header, stored: encoded.payload) == event)
        // u64 device, u64 user, u8 armed; 17 bytes, stored raw.
        var expected = ByteWriter(capacity: 17)
        expected.u64(9)
        expected.u64(4)
        expected.u8(armed ? 1 : 0)
        #expect(encoded.header.codec == Codec.none.rawValue && encoded.payload == expected.bytes)
    }

    @Test func anArmedFlagOtherThanZeroOrOneIsADamagedRecord() throws {
        var encoded = EventCodec.encode(
            .foundNoticeSet(FoundNoticeSet(deviceID: 9, userID: 4, armed: true)), receivedAtMicros: 0)
        encoded.payload[16] = 2
        #expect(throws: (any Error).self) {
            try EventCodec.decode(header: encoded.header, stored: encoded.payload)
        }
        encoded.payload[16] = 1
        encoded.payload.append(0)
        encoded.header.uncompressedBytes += 1
        #expect(throws: (any Error).self) {
            try EventCodec.decode(header: encoded.header, stored: encoded.payload)
        }
    }
}
