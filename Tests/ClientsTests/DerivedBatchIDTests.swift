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
