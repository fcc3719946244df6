import Compactor
import Events
import Foundation
import Testing

/// Region transitions and waypoints carry positions (a waypoint is often home or work): the
/// device's window, an erasure and a removal reach them as they reach fixes (docs/retention.md,
/// "Places"). Asserted on the segment files' bytes after a real compaction of a real log.
@Suite struct PlaceRetentionTests {
    static let day = RetentionPolicy.microsPerDay
    static let now: Int64 = 1_750_000_000_000_000

    /// A place in the log, named by a latitude no other place has: its 8 bytes find it in a file.
    struct Place: Hashable {
        var device: UInt64
        var latitude: Double
        var name: String
    }

    final class LogDirectory: @unchecked Sendable {
        let path = NSTemporaryDirectory() + "/findmy-places-\(UInt64.random(in: 0...UInt64.max))"
        deinit { try? FileManager.default.removeItem(atPath: path) }

        func open() throws -> LogWriter {
            var options = LogOptions()
            options.diagnostics = { _ in }
            options.segmentBytesMax = 512
            return try LogWriter(directory: path, options: options)
        }

        /// Every segment file's bytes, as on disk.
        func segmentFiles() throws -> [String: [UInt8]] {
            var files: [String: [UInt8]] = [:]
            for name in try FileManager.default.contentsOfDirectory(atPath: path) where name.hasSuffix(".seg")
            {
                files[name] = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path + "/" + name)))
            }
            return files
        }
    }

    static func bytes(_ value: Double) -> [UInt8] {
        withUnsafeBytes(of: value.bitPattern.littleEndian) { Array($0) }
    }

    /// Files in which the place's latitude or name appears.
    static func files(holding place: Place, in files: [String: [UInt8]]) -> [String] {
        files.filter { _, content in
            content.firstRange(of: bytes(place.latitude)) != nil
                || content.firstRange(of: Array(place.name.utf8)) != nil
        }.keys.sorted()
    }

    /// The places a decoded log still holds.
    static func placesInLog(_ writer: LogWriter) throws -> Set<Place> {
        var found: Set<Place> = []
        try LogReader(directory: writer.directory, writer: writer).read(from: 0) { record in
            switch try record.event() {
            case .regionTransition(let transition):
                found.insert(
                    Place(
                        device: transition.deviceID, latitude: transition.latitude!,
                        name: transition.regionName))
            case .waypointsReported(let reported):
                for waypoint in reported.waypoints {
                    found.insert(
                        Place(device: reported.deviceID, latitude: waypoint.latitude, name: waypoint.name))
                }
            default: break
            }
            return true
        }
        return found
    }

    /// Five devices, each with transitions and one whole list of waypoints at several ages:
    /// 1 the default 30 days, 2 an erased range, 3 removed, 4 all history erased, 5 a 365-day window.
    struct Scenario {
        var events: [(Event, receivedAtMicros: Int64)] = []
        var places: [Place] = []
        var live: Set<Place> = []
        var random: UInt64 = 0x5EED

        /// SplitMix64: values with no common runs of 4 bytes, so that LZ4 keeps each one whole as a
        /// literal and a byte search in the compressed segment files finds it.
        mutating func next() -> UInt64 {
            random &+= 0x9E37_79B9_7F4A_7C15
            var z = random
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }

        mutating func coordinate() -> Double { Double(next() % 160_000_000) / 1_000_000 - 80 }

        /// A latitude and a region name that no other place has.
        mutating func marker() -> (Double, String) {
            (coordinate(), String(next(), radix: 16) + String(next() % 4096, radix: 16))
        }

        mutating func transition(_ device: UInt64, ageDays: Int64, live: Bool) {
            let (latitude, name) = marker()
            let longitude = coordinate()
            let at = PlaceRetentionTests.now - ageDays * PlaceRetentionTests.day
            events.append(
                (
                    .regionTransition(
                        RegionTransition(
                            deviceID: device, clientProtocol: .owntracksHTTP, kind: .enter,
                            recordedAtMicros: at,
                            regionID: "r", regionName: name, trigger: "c", latitude: latitude,
                            longitude: longitude, accuracyMeters: 12)), at
                ))
            let place = Place(device: device, latitude: latitude, name: name)
            places.append(place)
            if live { self.live.insert(place) }
        }

        /// One list (complete) with a waypoint created at each age, received `receivedAgeDays` ago.
        mutating func waypoints(_ device: UInt64, ages: [(days: Int64, live: Bool)], receivedAgeDays: Int64) {
            var list: [Waypoint] = []
            for (days, live) in ages {
                let (latitude, name) = marker()
                list.append(
                    Waypoint(
                        createdAtMicros: PlaceRetentionTests.now - days * PlaceRetentionTests.day,
                        regionID: "w",
                        name: name, latitude: latitude, longitude: coordinate(),
                        radiusMeters: Double(next() % 1000)))
                let place = Place(device: device, latitude: latitude, name: name)
                places.append(place)
                if live { self.live.insert(place) }
            }
            events.append(
                (
                    .waypointsReported(
                        WaypointsReported(
                            deviceID: device, clientProtocol: .owntracksHTTP, complete: true, waypoints: list)
                    ),
                    PlaceRetentionTests.now - receivedAgeDays * PlaceRetentionTests.day
                ))
        }
    }

    static func scenario() -> Scenario {
        var scenario = Scenario()
        let enrolledAt = now - 500 * day
        for device: UInt64 in 1...5 {
            scenario.events.append(
                (
                    .deviceEnrolled(
                        DeviceEnrolled(
                            deviceID: device, userID: 1, deviceUUID: UUID128(high: 1, low: device),
                            name: "d\(device)",
                            platform: "ios", model: "")), enrolledAt
                ))
        }
        scenario.events.append(
            (.retentionChanged(RetentionChanged(scope: .device(5), days: 365)), enrolledAt))
        for device: UInt64 in 1...5 {
            let longWindow = device == 5
            let erasedAll = device == 3 || device == 4
            scenario.transition(device, ageDays: 40, live: longWindow)
            scenario.transition(device, ageDays: 5, live: device != 2 && !erasedAll)
            scenario.transition(device, ageDays: 1, live: !erasedAll)
            // A region made 400 days ago (home), one 5 days ago, one today; reported 2 days ago.
            scenario.waypoints(
                device, ages: [(400, false), (5, device != 2 && !erasedAll), (0, !erasedAll)],
                receivedAgeDays: 2)
            // An old list wholly past the window (received 45 days ago).
            scenario.waypoints(device, ages: [(50, longWindow), (45, longWindow)], receivedAgeDays: 45)
        }
        // Device 2: the owner erases what was recorded 10 to 3 days ago; device 4: everything.
        scenario.events.append(
            (
                .historyErased(
                    HistoryErased(deviceID: 2, fromMicros: now - 10 * day, toMicros: now - 3 * day)),
                now
            ))
        scenario.events.append((.historyErased(HistoryErased(deviceID: 4)), now))
        scenario.events.append((.deviceRemoved(DeviceRemoved(deviceID: 3)), now))
        return scenario
    }

    @Test func expiredErasedAndRemovedPlacesLeaveEverySegmentFile() throws {
        let directory = LogDirectory()
        let writer = try directory.open()
        defer { writer.close() }
        let scenario = Self.scenario()
        for (event, received) in scenario.events { _ = try writer.append(event, receivedAtMicros: received) }
        let before = try directory.segmentFiles()
        #expect(before.count > 3, "the places span several segments")
        for place in scenario.places {
            #expect(!Self.files(holding: place, in: before).isEmpty, "\(place) is findable before compaction")
        }

        let policy = try RetentionPolicy.fold(
            LogReader(directory: writer.directory, writer: writer), upTo: writer.durableEnd,
            settings: RetentionSettings())
        let dry = try LogCompaction(writer: writer, policy: policy, nowMicros: Self.now).run(dryRun: true)
        let report = try LogCompaction(writer: writer, policy: policy, nowMicros: Self.now).run(dryRun: false)
        #expect(report.placesRemoved == scenario.places.count - scenario.live.count)
        #expect(dry.placesRemoved == report.placesRemoved)
        #expect(report.fixesRemoved == 0)

        let after = try directory.segmentFiles()
        for place in scenario.places where !scenario.live.contains(place) {
            #expect(Self.files(holding: place, in: after) == [], "\(place) is gone from every segment file")
        }
        for place in scenario.live {
            #expect(!Self.files(holding: place, in: after).isEmpty, "\(place) is kept")
        }
        #expect(try Self.placesInLog(writer) == scenario.live)

        // A second run finds nothing more to remove: what is left is live.
        let again = try LogCompaction(writer: writer, policy: policy, nowMicros: Self.now).run(dryRun: false)
        #expect(again.placesRemoved == 0 && again.segmentsRewritten == 0)
    }

    @Test func anOpenSegmentHoldingADeadPlaceIsRolledAndCompacted() throws {
        let directory = LogDirectory()
        var options = LogOptions()
        options.diagnostics = { _ in }
        let writer = try LogWriter(directory: directory.path, options: options)
        defer { writer.close() }
        var scenario = Scenario()
        scenario.transition(7, ageDays: 31, live: false)
        scenario.transition(7, ageDays: 29, live: true)
        for (event, received) in scenario.events { _ = try writer.append(event, receivedAtMicros: received) }
        let policy = try RetentionPolicy.fold(
            LogReader(directory: writer.directory, writer: writer), upTo: writer.durableEnd,
            settings: RetentionSettings())
        let report = try LogCompaction(writer: writer, policy: policy, nowMicros: Self.now).run(dryRun: false)
        #expect(report.activeSegmentRolled && report.placesRemoved == 1)
        #expect(try Self.placesInLog(writer) == scenario.live)
    }
}

/// The per-record decision for places, as a pure function (PolicyTests' style).
@Suite struct PlacePlanTests {
    static let day = RetentionPolicy.microsPerDay
    static let now = PlaceRetentionTests.now

    func record(_ event: Event, offset: UInt64, received: Int64) -> LogRecord {
        var encoded = EventCodec.encode(event, receivedAtMicros: received)
        encoded.header.offset = offset
        return LogRecord(header: encoded.header, storedPayload: encoded.payload, segmentPath: "", position: 0)
    }

    func list(_ device: UInt64, complete: Bool, createdDaysAgo: [Int64]) -> Event {
        .waypointsReported(
            WaypointsReported(
                deviceID: device, clientProtocol: .owntracksMQTT, complete: complete,
                waypoints: createdDaysAgo.map {
                    Waypoint(
                        createdAtMicros: Self.now - $0 * Self.day, regionID: "", name: "n", latitude: 1,
                        longitude: 2,
                        radiusMeters: 50)
                }))
    }

    @Test func aWholeListKeepsSayingNoRegionsUntilItsArrivalAgesOut() throws {
        let policy = RetentionPolicy(settings: RetentionSettings())
        // Every waypoint expired, the list arrived a day ago: it stays, as a list of none.
        guard
            case .shrinkPlaces(let emptied, 2) = try policy.plan(
                record(
                    list(1, complete: true, createdDaysAgo: [40, 400]), offset: 5,
                    received: Self.now - Self.day),
                nowMicros: Self.now)
        else {
            Issue.record("expected the list without its waypoints")
            return
        }
        #expect(emptied.waypoints.isEmpty && emptied.complete)
        let empty = record(.waypointsReported(emptied), offset: 5, received: Self.now - Self.day)
        #expect(EventCodec.isEmptyWaypointList(empty.header))
        #expect(empty.header.recordedMinMicros == 0 && empty.header.recordedMaxMicros == 0)
        #expect(try policy.plan(empty, nowMicros: Self.now) == .keep)
        #expect(policy.firstDeathMicros(empty.header) == Self.now - Self.day + 30 * Self.day)
        // Arrived before the window: gone.
        let old = record(.waypointsReported(emptied), offset: 5, received: Self.now - 31 * Self.day)
        #expect(try policy.plan(old, nowMicros: Self.now) == .dropPlaces(removedPlaces: 0))
        // One waypoint that is not a whole list, expired: the record goes.
        #expect(
            try policy.plan(
                record(list(1, complete: false, createdDaysAgo: [40]), offset: 5, received: Self.now),
                nowMicros: Self.now) == .dropPlaces(removedPlaces: 1))
        #expect(
            try policy.plan(
                record(list(1, complete: false, createdDaysAgo: [3]), offset: 5, received: Self.now),
                nowMicros: Self.now) == .keep)
    }

    @Test func aRemovalDropsEvenAnEmptyListAndAnErasureOnlyCoversEarlierRecords() throws {
        var policy = RetentionPolicy(settings: RetentionSettings())
        policy.apply(.deviceRemoved(DeviceRemoved(deviceID: 1)), offset: 10)
        policy.apply(.historyErased(HistoryErased(deviceID: 2)), offset: 10)
        #expect(
            try policy.plan(
                record(list(1, complete: true, createdDaysAgo: []), offset: 5, received: Self.now),
                nowMicros: Self.now) == .dropPlaces(removedPlaces: 0))
        let transition = Event.regionTransition(
            RegionTransition(
                deviceID: 2, clientProtocol: .owntracksHTTP, kind: .leave, recordedAtMicros: Self.now,
                regionID: "", regionName: "", trigger: "", latitude: 1, longitude: 2, accuracyMeters: nil))
        #expect(
            try policy.plan(record(transition, offset: 5, received: Self.now), nowMicros: Self.now)
                == .dropPlaces(removedPlaces: 1))
        #expect(
            try policy.plan(record(transition, offset: 11, received: Self.now), nowMicros: Self.now) == .keep)
        #expect(policy.firstDeathMicros(record(transition, offset: 5, received: Self.now).header) == .min)
        #expect(
            policy.firstDeathMicros(record(transition, offset: 11, received: Self.now).header)
                == Self.now + 30 * Self.day)
    }
}
