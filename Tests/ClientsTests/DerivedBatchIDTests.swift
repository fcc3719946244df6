import Events
import Ingest
import Testing

/// Apps without batch ids: the id is derived from the device, the protocol and the body, so that a
/// byte-identical resend is the same batch and anything else is another.
@Suite struct DerivedBatchIDTests {
    let body = Array(#"{"_type":"location","lat":52.5,"lon":13.4,"tst":1764756000}"#.utf8)

    @Test func theSameRequestIsTheSameBatchAndAnyDifferenceAnother() {
        let id = ClientReport.derivedBatchID(deviceID: 7, clientProtocol: .owntracksHTTP, body: body)
        #expect(id == ClientReport.derivedBatchID(deviceID: 7, clientProtocol: .owntracksHTTP, body: body))
        #expect(id != ClientReport.derivedBatchID(deviceID: 8, clientProtocol: .owntracksHTTP, body: body))
        #expect(id != ClientReport.derivedBatchID(deviceID: 7, clientProtocol: .owntracksMQTT, body: body))
        #expect(
            id
                != ClientReport.derivedBatchID(
                    deviceID: 7, clientProtocol: .owntracksHTTP, body: body + [0x20]))
        #expect(id != .zero)
        // A version-4-shaped UUID: its text form parses back.
        #expect(UUID128(id.description) == id)
        #expect(id.description.dropFirst(14).first == "4")
    }

    /// Every app's id is the digest's first 16 bytes with the version and variant bits set, as the
    /// byte-wise code before it made them (a change would turn a retry after an upgrade into a
    /// second batch).
    @Test func theIDOfADigestIsItsFirstSixteenBytesAsVersionFour() {
        var state: UInt64 = 0x1234_5678
        for _ in 0..<200 {
            let digest = (0..<32).map { _ -> UInt8 in
                state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
                return UInt8(truncatingIfNeeded: state >> 56)
            }
            var bytes = Array(digest.prefix(16))
            bytes[6] = (bytes[6] & 0x0F) | 0x40
            bytes[8] = (bytes[8] & 0x3F) | 0x80
            #expect(ClientReport.batchID(digest: digest) == UUID128(bytes: bytes))
        }
    }

    /// The id is stored with every batch and compared with a resend's, so a change in how it is
    /// computed would turn a retry after an upgrade into a second batch: these are the ids the
    /// code gave before it hashed in place: SHA-256(device id, LE ‖ protocol number ‖ body).
    @Test func theIDOfAFixedRequestStaysTheSameAcrossReleases() {
        #expect(
            ClientReport.derivedBatchID(deviceID: 7, clientProtocol: .owntracksHTTP, body: body).description
                == "59ec6b4b-ddeb-4974-8a47-90bf9c8232e9")
        let bigBody = Array(repeating: Array(0...255 as ClosedRange<UInt8>), count: 5).flatMap { $0 }
        #expect(
            ClientReport.derivedBatchID(
                deviceID: 0x0123_4567_89AB_CDEF, clientProtocol: .overland, body: bigBody
            )
            .description == "33682e82-9a29-45bb-82e6-0db70563775c")
        #expect(
            ClientReport.derivedBatchID(deviceID: 7, clientProtocol: .overland, body: []).description
                == "f4cec2d7-aa3f-4d07-b880-c197b3f07d85")
    }
}
