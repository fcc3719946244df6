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
}
