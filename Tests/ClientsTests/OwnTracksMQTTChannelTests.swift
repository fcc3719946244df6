import Commands
import Events
import Foundation
import Identity
import Ingest
import MQTT
import MosquittoSupport
import Synchronization
@_exported import TestSupport
import Testing
import Threads

@testable import Clients

/// The OwnTracks MQTT command channel against a real mosquitto: a locate is published at QoS 1 to
/// the device's topic + /cmd as OwnTracks' reportLocation, `sent` once the broker acknowledged it.
@Suite struct OwnTracksMQTTChannelTests {
    final class Outcomes: Sendable {
        let values = Mutex<[DeliveryOutcome]>([])
        func add(_ outcome: DeliveryOutcome) { values.withLock { $0.append(outcome) } }
        var all: [DeliveryOutcome] { values.withLock { $0 } }
    }

    @Test func aLocateIsPublishedToTheDevicesCmdTopicAndSentOnceTheBrokerHasIt() throws {
        let directory = NSTemporaryDirectory() + "findmy-mqtt-channel-\(UInt64.random(in: 0...UInt64.max))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var options = LogOptions()
        options.diagnostics = { _ in }
        let ingest = try IngestService(log: try LogWriter(directory: directory + "/log", options: options))
        defer { ingest.log.close() }
        let alice = try ingest.identity.createUser(name: "alice", role: .member)
        let topic = "owntracks/alice/phone"
        guard
            case .device(let phone, enrolled: true) = try ingest.topicDevice(
                userName: "alice", deviceName: "phone", uuid: OwnTracksMQTT.deviceUUID(topic: topic),
                platform: "owntracks")
        else { throw BrokerError("the topic device was not enrolled") }
        // A device enrolled through the API (a UUID of the phone's own) has no topic findmy knows.
        let other = ingest.registrySnapshot.nextDeviceID
        _ = try ingest.identity.appendAndApply(
            .deviceEnrolled(
                DeviceEnrolled(
                    deviceID: other, userID: alice.userID, deviceUUID: UUID128.random(), name: "tablet",
                    platform: "owntracks", model: "")), receivedAtMicros: wallClockMicros())

        let broker = try Mosquitto()
        var configuration = MQTTClient.Configuration(
            host: "127.0.0.1", port: broker.port, clientID: "findmy-channel-test",
            topicFilters: ["owntracks/+/+"])
        configuration.reconnectDelayMillisMin = 50
        let client = MQTTClient(configuration) { _ in }
        let filter = try #require(TopicFilter("owntracks/+/+", wildcards: 2))
        let channel = OwnTracksMQTTChannel(ingest: ingest, topicFilter: filter, client: { client })
        #expect(channel.name == "owntracks-mqtt")
        #expect(
            channel.addresses(forDevice: phone) == [ChannelAddress(provider: "owntracks-mqtt", token: topic)])
        #expect(channel.addresses(forDevice: other) == [])
        #expect(channel.addresses(forDevice: 999) == [])

        // The phone's side: a subscriber on its cmd topic (Debian's mosquitto_sub).
        let phoneSide = try broker.subscribe(topic: topic + "/cmd", count: 1)
        let outcomes = Outcomes()
        let locate = CommandDelivery(
            commandID: "3f1c2e4a-0000-4000-8000-000000000001", kind: .locate, deviceID: phone, message: nil,
            phone: nil)
        // Handed over before the client connects: it goes out once connected.
        channel.deliver(locate, to: channel.addresses(forDevice: phone)[0]) { outcomes.add($0) }
        client.start()
        defer { client.stop(graceMicros: 0) }
        #expect(waitUntil { outcomes.all == [.sent(providerID: nil)] }, "\(outcomes.all)")
        #expect(waitUntil { phoneSide.messages.count == 1 })
        #expect(phoneSide.messages == [topic + "/cmd " + #"{"_type":"cmd","action":"reportLocation"}"#])
        #expect(client.status.publishesAcknowledged == 1)
        #expect(client.status.publishesPending == 0)

        // What OwnTracks cannot do is a failure with a reason, and nothing is published.
        for kind in [CommandKind.sound, .lost, .found] {
            let asked = Outcomes()
            channel.deliver(
                CommandDelivery(commandID: "c", kind: kind, deviceID: phone, message: "m", phone: "1"),
                to: ChannelAddress(provider: "owntracks-mqtt", token: topic)
            ) { asked.add($0) }
            guard case .failed(let reason) = asked.all.first else {
                Issue.record("\(kind): \(asked.all)")
                continue
            }
            #expect(reason.hasPrefix("OwnTracks has no "), "\(kind): \(reason)")
        }
        #expect(client.status.publishesAcknowledged == 1)
    }

    @Test func aRemovedTopicDeviceHasNoAddress() throws {
        let directory = NSTemporaryDirectory() + "findmy-mqtt-channel-\(UInt64.random(in: 0...UInt64.max))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var options = LogOptions()
        options.diagnostics = { _ in }
        let ingest = try IngestService(log: try LogWriter(directory: directory + "/log", options: options))
        defer { ingest.log.close() }
        _ = try ingest.identity.createUser(name: "bob", role: .member)
        let topic = "owntracks/bob/watch"
        guard
            case .device(let watch, _) = try ingest.topicDevice(
                userName: "bob", deviceName: "watch", uuid: OwnTracksMQTT.deviceUUID(topic: topic),
                platform: "owntracks")
        else { throw BrokerError("not enrolled") }
        let filter = try #require(TopicFilter("owntracks/+/+", wildcards: 2))
        let channel = OwnTracksMQTTChannel(ingest: ingest, topicFilter: filter, client: { nil })
        #expect(channel.addresses(forDevice: watch).count == 1)
        _ = try ingest.identity.appendAndApply(
            .deviceRemoved(DeviceRemoved(deviceID: watch)), receivedAtMicros: wallClockMicros())
        #expect(channel.addresses(forDevice: watch) == [])
        #expect(
            try ingest.topicDevice(
                userName: "bob", deviceName: "watch", uuid: OwnTracksMQTT.deviceUUID(topic: topic),
                platform: "owntracks") == .removed(deviceID: watch))
    }
}
