import Events
import Testing

@testable import Ingest

/// The broker topic of a device and the UUID derived from it (OwnTracks' MQTT mode).
@Suite struct TopicDeviceTests {
    @Test func theTopicFillsTheFiltersTwoLevels() {
        #expect(
            IngestService.topic(filter: "owntracks/+/+", userName: "kim", deviceName: "phone")
                == "owntracks/kim/phone")
        #expect(
            IngestService.topic(filter: "home/+/loc/+", userName: "kim", deviceName: "phone")
                == "home/kim/loc/phone")
        for name in ["a/b", "a+b", "a#", ""] {
            #expect(
                IngestService.topic(filter: "owntracks/+/+", userName: "kim", deviceName: name) == nil,
                "\(name)")
        }
        #expect(IngestService.topic(filter: "owntracks/+", userName: "kim", deviceName: "phone") == nil)
    }

    @Test func theSameTopicIsAlwaysTheSameVersion8UUID() {
        let uuid = IngestService.deviceUUID(topic: "owntracks/kim/phone")
        #expect(uuid == IngestService.deviceUUID(topic: "owntracks/kim/phone"))
        #expect(uuid != IngestService.deviceUUID(topic: "owntracks/kim/tablet"))
        let text = uuid.description
        // xxxxxxxx-xxxx-8xxx-[89ab]xxx-xxxxxxxxxxxx
        #expect(Array(text)[14] == "8" && "89ab".contains(Array(text)[19]), "\(text)")
    }
}
