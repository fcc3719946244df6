import Compactor
import Core
import Events
import Foundation
import Identity
import Testing

/// Command events (types 27-31) say who asked a device for its position and when, and a `lost`
/// carries the owner's message and phone number: a closed command dies with its device's window,
/// an open one (a pending `lost`) lives as long as the live server needs it, and a removal takes
/// every one (docs/retention.md, "Commands"). Asserted on the segment files' bytes after a real
/// compaction of a real log, and on the registry a full scan of the compacted log folds.
@Suite struct CommandRetentionTests {
    static let day = RetentionPolicy.microsPerDay
    static let now: Int64 = 1_750_000_000_000_000

    /// One command of the scenario: its message and phone are unique strings a file search finds.
    struct Command: Hashable {
        var id: UUID128
        var device: UInt64
        var message: String
        var phone: String
    }

    struct Scenario {
        var events: [(Event, Int64)] = []
        var commands: [Command] = []
        var serial: UInt64 = 0

        /// A command requested `ageDays` ago, closed (answered or ended) an hour later or left open.
        mutating func command(
            _ device: UInt64, _ kind: CommandKindCode, ageDays: Int64, close: Close?
        ) -> Command {
            serial += 1
            let command = Command(
                id: UUID128(high: device, low: serial), device: device, message: "msg-\(device)-\(serial)-x",
                phone: "+4915\(device)\(serial)777")
            let at = Self.now - ageDays * Self.day
            events.append(
                (
                    .commandRequested(
                        CommandRequested(
                            commandID: command.id, deviceID: device, kind: kind, message: command.message,
                            phone: command.phone, requestedByUserID: 1, requestedAtMicros: at)), at
                ))
            events.append(
                (.commandSent(CommandSent(commandID: command.id, deviceID: device, channel: "apns")), at + 1))
            events.append(
                (
                    .commandDeliveryFailed(
                        CommandDeliveryFailed(
                            commandID: command.id, deviceID: device, channel: "fcm",
                            reason: "503 \(command.phone)",
                            retryAtMicros: nil, addressDead: false)), at + 2
                ))
            switch close {
            case .answered?:
                events.append(
                    (
                        .commandAnswered(
                            CommandAnswered(
                                commandID: command.id, deviceID: device, batchOffset: 0, fixIndex: 0,
                                clientProtocol: .native)), at + 3_600_000_000
                    ))
            case .ended(let reason)?:
                events.append(
                    (
                        .commandExpired(
                            CommandExpired(commandID: command.id, deviceID: device, reason: reason)),
                        at + 3_600_000_000
                    ))
            case nil:
                break
            }
            commands.append(command)
            return command
        }

        enum Close {
            case answered
            case ended(String)
        }

        static let day = CommandRetentionTests.day
        static let now = CommandRetentionTests.now
    }

    final class LogDirectory: @unchecked Sendable {
        let path = NSTemporaryDirectory() + "/findmy-cmdret-\(UInt64.random(in: 0...UInt64.max))"
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

    /// Files in which the command's message or phone appears.
    static func files(holding command: Command, in files: [String: [UInt8]]) -> [String] {
        files.filter { _, content in
            content.firstRange(of: Array(command.message.utf8)) != nil
                || content.firstRange(of: Array(command.phone.utf8)) != nil
        }.keys.sorted()
    }

    /// The ids of the commands whose events a decoded log still holds, with how many events each.
    static func commandsInLog(_ writer: LogWriter) throws -> [UUID128: Int] {
        var found: [UUID128: Int] = [:]
        try LogReader(directory: writer.directory, writer: writer).read(from: 0) { record in
            switch try record.event() {
            case .commandRequested(let c): found[c.commandID, default: 0] += 1
            case .commandSent(let c): found[c.commandID, default: 0] += 1
            case .commandDeliveryFailed(let c): found[c.commandID, default: 0] += 1
            case .commandAnswered(let c): found[c.commandID, default: 0] += 1
            case .commandExpired(let c): found[c.commandID, default: 0] += 1
            default: break
            }
            return true
        }
        return found
    }

    static func registry(_ writer: LogWriter) throws -> Registry {
        try IdentityService(log: writer, limits: IdentityLimits()).registrySnapshot
    }

    static func compact(_ writer: LogWriter, dryRun: Bool = false) throws -> LogCompactionReport {
        let policy = try RetentionPolicy.fold(
            LogReader(directory: writer.directory, writer: writer), upTo: writer.durableEnd,
            settings: RetentionSettings())
        return try LogCompaction(writer: writer, policy: policy, nowMicros: now).run(dryRun: dryRun)
    }

    /// Two devices (default 30-day window): old closed commands of both, an old open `lost`, a
    /// recent closed `sound`, a recent open `lost` of device 2.
    static func scenario() -> (Scenario, dead: [Command], live: [Command]) {
        var s = Scenario()
        s.events.append(
            (
                .userCreated(
                    UserCreated(
                        userID: 1, name: "ada", role: .admin, tokenHash: Array(repeating: 1, count: 32))),
                now - 200 * day
            ))
        for device: UInt64 in 1...2 {
            s.events.append(
                (
                    .deviceEnrolled(
                        DeviceEnrolled(
                            deviceID: device, userID: 1, deviceUUID: UUID128(high: 9, low: device),
                            name: "d\(device)", platform: "ios", model: "")), now - 200 * day
                ))
        }
        let oldLocate = s.command(1, .locate, ageDays: 40, close: .answered)
        let oldLost = s.command(1, .lost, ageDays: 50, close: .ended("found"))
        let oldFound = s.command(1, .found, ageDays: 45, close: .answered)
        let openLost = s.command(1, .lost, ageDays: 40, close: nil)
        let oldSound = s.command(2, .sound, ageDays: 31, close: .ended("expired"))
        let recentSound = s.command(1, .sound, ageDays: 2, close: .ended("expired"))
        let recentLost = s.command(2, .lost, ageDays: 1, close: nil)
        return (s, [oldLocate, oldLost, oldFound, oldSound], [openLost, recentSound, recentLost])
    }

    @Test func oldClosedCommandsLeaveEverySegmentFileOpenAndRecentOnesStay() throws {
        let directory = LogDirectory()
        let writer = try directory.open()
        defer { writer.close() }
        let (scenario, dead, live) = Self.scenario()
        for (event, received) in scenario.events { _ = try writer.append(event, receivedAtMicros: received) }
        let before = try directory.segmentFiles()
        #expect(before.count > 3, "the commands span several segments")
        for command in scenario.commands {
            #expect(!Self.files(holding: command, in: before).isEmpty, "\(command) is findable before")
        }
        let registryBefore = try Self.registry(writer)

        let dry = try Self.compact(writer, dryRun: true)
        let report = try Self.compact(writer)
        #expect(report.commandEventsRemoved == dead.count * 4)
        #expect(dry.commandEventsRemoved == report.commandEventsRemoved)
        #expect(report.fixesRemoved == 0 && report.placesRemoved == 0)

        let after = try directory.segmentFiles()
        for command in dead {
            #expect(
                Self.files(holding: command, in: after) == [], "\(command) is gone from every segment file")
        }
        for command in live {
            #expect(!Self.files(holding: command, in: after).isEmpty, "\(command) is kept")
        }
        let left = try Self.commandsInLog(writer)
        #expect(Set(left.keys) == Set(live.map(\.id)))
        #expect(left[live[0].id] == 3 && left[live[1].id] == 4 && left[live[2].id] == 3)

        // The registry a full scan of the compacted log folds: the same open commands (the old
        // lost too), and the same request times for every kind asked within the last day.
        let registryAfter = try Self.registry(writer)
        #expect(registryAfter.commands.open == registryBefore.commands.open)
        #expect(registryAfter.commands.openByDevice == registryBefore.commands.openByDevice)
        #expect(registryAfter.commands.lost(deviceID: 1)?.request.message == live[0].message)
        for (key, at) in registryBefore.commands.lastRequested where at >= Self.now - Self.day * 3 {
            #expect(registryAfter.commands.lastRequested[key] == at, "\(key)")
        }

        let again = try Self.compact(writer)
        #expect(again.commandEventsRemoved == 0 && again.segmentsRewritten == 0)
    }

    @Test func aRemovalDropsEveryCommandOfTheDeviceOpenOrNot() throws {
        let directory = LogDirectory()
        let writer = try directory.open()
        defer { writer.close() }
        let (scenario, _, _) = Self.scenario()
        for (event, received) in scenario.events { _ = try writer.append(event, receivedAtMicros: received) }
        _ = try writer.append(.deviceRemoved(DeviceRemoved(deviceID: 2)), receivedAtMicros: Self.now)
        _ = try Self.compact(writer)
        let after = try directory.segmentFiles()
        for command in scenario.commands where command.device == 2 {
            #expect(Self.files(holding: command, in: after) == [], "\(command) went with its device")
        }
        let left = try Self.commandsInLog(writer)
        #expect(!left.keys.contains { $0.high == 2 })
        #expect(left.keys.contains { $0.high == 1 })
    }

    @Test func anErasureOfAllHistoryDropsClosedCommandsButNotTheOpenLost() throws {
        let directory = LogDirectory()
        let writer = try directory.open()
        defer { writer.close() }
        let (scenario, _, live) = Self.scenario()
        for (event, received) in scenario.events { _ = try writer.append(event, receivedAtMicros: received) }
        _ = try writer.append(.historyErased(HistoryErased(deviceID: 1)), receivedAtMicros: Self.now)
        _ = try Self.compact(writer)
        let after = try directory.segmentFiles()
        // Device 1: only its open lost is left; device 2 is untouched by device 1's erasure.
        let left = try Self.commandsInLog(writer)
        #expect(Set(left.keys) == [live[0].id, live[2].id])
        for command in scenario.commands where command.device == 1 && command != live[0] {
            #expect(Self.files(holding: command, in: after) == [], "\(command) is erased")
        }
    }

    /// A ranged erasure, as a pure function of the policy: a closed command whose `requested_at`
    /// is in the range goes, one outside it stays (until its window ends), an open one stays, and
    /// one that closes after the erasure goes at the next run (the erasure covers its request).
    @Test func aRangedErasureCoversClosedCommandsRequestedInTheRange() {
        var policy = RetentionPolicy(settings: RetentionSettings())
        var offset: UInt64 = 0
        func fold(_ event: Event) {
            offset += 1
            policy.apply(event, offset: offset)
            policy.collectCommand(event, offset: offset)
        }
        func request(_ serial: UInt64, ageDays: Int64) -> UUID128 {
            let id = UUID128(high: 1, low: serial)
            fold(
                .commandRequested(
                    CommandRequested(
                        commandID: id, deviceID: 1, kind: .lost, message: "m", phone: "p",
                        requestedByUserID: 1,
                        requestedAtMicros: Self.now - ageDays * Self.day)))
            return id
        }
        func close(_ id: UUID128) {
            fold(.commandExpired(CommandExpired(commandID: id, deviceID: 1, reason: "found")))
        }
        let inRange = request(1, ageDays: 5)
        let beforeRange = request(2, ageDays: 9)
        let openInRange = request(3, ageDays: 4)
        close(inRange)
        close(beforeRange)
        fold(
            .historyErased(
                HistoryErased(
                    deviceID: 1, fromMicros: Self.now - 6 * Self.day, toMicros: Self.now - 3 * Self.day)))
        let afterErasure = request(4, ageDays: 5)
        close(afterErasure)
        #expect(policy.commandDeath(inRange, nowMicros: Self.now) == .erased)
        #expect(policy.commandDeath(beforeRange, nowMicros: Self.now) == nil)
        #expect(policy.commandDeath(openInRange, nowMicros: Self.now) == nil)
        // Requested after the erasure was made: not covered, whatever its time.
        #expect(policy.commandDeath(afterErasure, nowMicros: Self.now) == nil)
        close(openInRange)
        #expect(policy.commandDeath(openInRange, nowMicros: Self.now) == .erased)
        #expect(policy.commandDeath(beforeRange, nowMicros: Self.now + 22 * Self.day) == .expired)
        #expect(Set(policy.deadCommands(nowMicros: Self.now)) == [inRange, openInRange])
    }

    /// A dead command in the open segment rolls it (like a dead fix), so it outlives its window by
    /// at most one compaction interval; an open one does not.
    @Test func anOpenSegmentHoldingADeadCommandIsRolledAndCompacted() throws {
        for (close, rolled) in [(true, true), (false, false)] {
            let directory = LogDirectory()
            var options = LogOptions()
            options.diagnostics = { _ in }
            let writer = try LogWriter(directory: directory.path, options: options)
            defer { writer.close() }
            var scenario = Scenario()
            let command = scenario.command(1, .lost, ageDays: 31, close: close ? .ended("found") : nil)
            for (event, received) in scenario.events {
                _ = try writer.append(event, receivedAtMicros: received)
            }
            let report = try Self.compact(writer)
            #expect(report.activeSegmentRolled == rolled)
            #expect(report.commandEventsRemoved == (close ? 4 : 0))
            let left = try directory.segmentFiles()
            #expect(Self.files(holding: command, in: left).isEmpty == close)
        }
    }
}
