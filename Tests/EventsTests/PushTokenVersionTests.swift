import Events
import Testing

/// push_token_registered (type 7) gained the Web Push keys in payload version 2; version 1
/// records, written before, still decode (as registrations without keys).
@Suite struct PushTokenVersionTests {
    let keyed = PushTokenRegistered(
        deviceID: 7, provider: "unifiedpush", token: "https://push.example/up/abc", topic: "",
        environment: "",
        webPushPublicKey: [4] + [UInt8](repeating: 9, count: 64),
        webPushAuthSecret: [UInt8](repeating: 5, count: 16))

    @Test func keysAreVersion2AndRoundTrip() throws {
        let encoded = EventCodec.encode(.pushTokenRegistered(keyed), receivedAtMicros: 1)
        #expect(encoded.header.eventVersion == 2)
        #expect(
            try EventCodec.decode(header: encoded.header, stored: encoded.payload)
                == .pushTokenRegistered(keyed))
    }

    @Test func withoutKeysItStaysVersion1() throws {
        var plain = keyed
        plain.provider = "apns-location"
        plain.webPushPublicKey = []
        plain.webPushAuthSecret = []
        let encoded = EventCodec.encode(.pushTokenRegistered(plain), receivedAtMicros: 1)
        #expect(encoded.header.eventVersion == 1)
        #expect(
            try EventCodec.decode(header: encoded.header, stored: encoded.payload)
                == .pushTokenRegistered(plain))
    }

    /// A version 1 payload as findmy wrote it before version 2 existed, byte for byte.
    @Test func aVersion1RecordDecodesWithoutKeys() throws {
        var writer = ByteWriter()
        writer.u64(3)
        for text in ["fcm", "tok", "", ""] {
            writer.u16(UInt16(text.utf8.count))
            writer.raw(Array(text.utf8))
        }
        let header = RecordHeader(
            type: EventType.pushTokenRegistered.rawValue, codec: 0, eventVersion: 1, receivedAtMicros: 1,
            recordedMinMicros: 0, recordedMaxMicros: 0, fixCount: 0,
            uncompressedBytes: UInt32(writer.bytes.count),
            deviceKey: 3, idempotencyKey: .zero)
        #expect(
            try EventCodec.decode(header: header, stored: writer.bytes)
                == .pushTokenRegistered(
                    PushTokenRegistered(
                        deviceID: 3, provider: "fcm", token: "tok", topic: "", environment: "")))
        // Version 1 with trailing key bytes is damage, not a version 2 record.
        var trailing = writer
        trailing.u16(0)
        trailing.u16(0)
        var damaged = header
        damaged.uncompressedBytes = UInt32(trailing.bytes.count)
        #expect(throws: (any Error).self) { try EventCodec.decode(header: damaged, stored: trailing.bytes) }
        // A version 3, unknown to this findmy, is skipped as unknown.
        let future = EventCodec.encode(.pushTokenRegistered(keyed), receivedAtMicros: 1)
        var futureHeader = future.header
        futureHeader.eventVersion = 3
        guard case .unknown = try EventCodec.decode(header: futureHeader, stored: future.payload) else {
            Issue.record("version 3 must decode as unknown")
            return
        }
    }
}
