import Core
import Events
import Identity
import Testing

/// The registry's fold of presence (Core/PresenceBook.swift), event in, state out: what the
/// poller judges against and what the device JSON shows.
@Suite struct RegistryPresenceTests {
    func registry(_ events: [Event]) -> Registry {
        var registry = Registry(recentBatchesPerDeviceMax: 4)
        registry.apply(
            .deviceEnrolled(
                DeviceEnrolled(
                    deviceID: 1, userID: 1, deviceUUID: UUID128(high: 1, low: 1), name: "laptop",
                    platform: "linux", model: "")),
            offset: 0)
        for (index, event) in events.enumerated() { registry.apply(event, offset: UInt64(index + 1)) }
        return registry
    }

    let link = Event.devicePresenceLinked(
        DevicePresenceLinked(deviceID: 1, userID: 1, nodeID: "5", nodeName: "laptop"))

    func change(online: Bool, lastSeen: Int64?, at: Int64, node: String = "5") -> Event {
        .presenceChanged(
            PresenceChanged(
                deviceID: 1, nodeID: node, online: online, lastSeenMicros: lastSeen, observedAtMicros: at))
    }

    @Test func onlineIsNowAndOfflineIsLastSeen() {
        #expect(registry([]).presence(of: 1, nowMicros: 9) == nil)
        #expect(
            registry([link]).presence(of: 1, nowMicros: 9)
                == PresenceView(online: false, atMicros: nil, nodeName: "laptop"))
        #expect(
            registry([link, change(online: true, lastSeen: 3, at: 5)]).presence(of: 1, nowMicros: 9)?.atMicros
                == 9)
        let offline = registry([link, change(online: false, lastSeen: 3, at: 5)]).presence(
            of: 1, nowMicros: 9)
        #expect(offline == PresenceView(online: false, atMicros: 3, nodeName: "laptop"))
        #expect(
            registry([link, change(online: false, lastSeen: nil, at: 5)]).presence(of: 1, nowMicros: 9)?
                .atMicros == 5)
    }

    @Test func anotherNodesChangeARelinkAndAnUnlinkAreNotMixedUp() {
        // A change of a node the device is no longer linked to is not its state.
        #expect(
            registry([link, change(online: true, lastSeen: nil, at: 5, node: "6")]).presence.states[1] == nil)
        let relinked = Event.devicePresenceLinked(
            DevicePresenceLinked(deviceID: 1, userID: 1, nodeID: "6", nodeName: "new"))
        let after = registry([link, change(online: true, lastSeen: nil, at: 5), relinked])
        #expect(after.presence.states[1] == nil && after.presence.links[1]?.nodeID == "6")
        let unlink = Event.devicePresenceLinked(
            DevicePresenceLinked(deviceID: 1, userID: 1, nodeID: "", nodeName: ""))
        #expect(
            registry([link, change(online: true, lastSeen: nil, at: 5), unlink]).presence(of: 1, nowMicros: 9)
                == nil)
    }

    @Test func anErasureOfItsTimeAndARemovalForgetTheState() {
        let state = [link, change(online: false, lastSeen: 100, at: 150)]
        let erasedAround = Event.historyErased(HistoryErased(deviceID: 1, fromMicros: 50, toMicros: 101))
        let erasedBefore = Event.historyErased(HistoryErased(deviceID: 1, fromMicros: 0, toMicros: 100))
        let erasedAll = Event.historyErased(HistoryErased(deviceID: 1, fromMicros: nil, toMicros: nil))
        #expect(registry(state + [erasedAround]).presence.states[1] == nil)
        #expect(registry(state + [erasedAll]).presence.states[1] == nil)
        #expect(registry(state + [erasedBefore]).presence.states[1]?.lastSeenMicros == 100)
        let removed = registry(state + [.deviceRemoved(DeviceRemoved(deviceID: 1))])
        #expect(removed.presence.links[1] == nil && removed.presence.states[1] == nil)
        #expect(removed.presence(of: 1, nowMicros: 9) == nil)
    }
}
