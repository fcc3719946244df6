import Commands
import Core
import Events
import Foundation
import Identity
import Synchronization
import Testing

/// A clock the tests move by hand: rate limits, retries and expiry run on it.
final class ManualClock: Sendable {
    private let micros = Atomic<Int64>(1_800_000_000_000_000)
    var nowMicros: Int64 { micros.load(ordering: .relaxed) }
    func advance(seconds: Int) { micros.add(Int64(seconds) * 1_000_000, ordering: .relaxed) }
}

/// Stands in for a remote push provider (the rules allow a fake only there): it records every
/// delivery it was asked for and answers each with the next scripted outcome, at once.
final class RecordingProvider: CommandChannel, @unchecked Sendable {
    let name: String
    let addressList: [ChannelAddress]
    private let lock = NSLock()
    private var script: [DeliveryOutcome]
    private(set) var asked: [(CommandDelivery, ChannelAddress)] = []

    init(name: String, addresses: [ChannelAddress], script: [DeliveryOutcome]) {
        self.name = name
        self.addressList = addresses
        self.script = script
    }

    func addresses(forDevice deviceID: UInt64) -> [ChannelAddress] { addressList }

    func deliver(
        _ delivery: CommandDelivery, to address: ChannelAddress,
        completion: @escaping @Sendable (DeliveryOutcome) -> Void
    ) {
        let outcome = lock.withLock { () -> DeliveryOutcome in
            asked.append((delivery, address))
            return script.isEmpty ? .sent(providerID: nil) : script.removeFirst()
        }
        completion(outcome)
    }

    var askedCount: Int { lock.withLock { asked.count } }
}

/// An identity over a fresh log with one owner (user 1) and one device (1).
final class Scratch {
    let directory: String
    let identity: IdentityService
    let clock = ManualClock()
    var now: @Sendable () -> Int64 {
        let clock = self.clock
        return { clock.nowMicros }
    }

    init() throws {
        directory = NSTemporaryDirectory() + "findmy-commands-\(UInt64.random(in: 0...UInt64.max))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        var options = LogOptions()
        options.diagnostics = { _ in }
        let clock = self.clock
        identity = try IdentityService(
            log: try LogWriter(directory: directory + "/log", options: options),
            clockMicros: { clock.nowMicros })
        _ = try identity.createUser(name: "olga", role: .member)
        _ = try identity.appendAndApply(
            .deviceEnrolled(
                DeviceEnrolled(
                    deviceID: 1, userID: 1, deviceUUID: UUID128.random(), name: "phone", platform: "ios",
                    model: "")),
            receivedAtMicros: clock.nowMicros)
    }

    /// Every event of the log, in order.
    func events() throws -> [Event] {
        var events: [Event] = []
        try LogReader(directory: directory + "/log", writer: identity.store.writer).read(from: 0) { record in
            events.append(try record.event())
            return true
        }
        return events
    }

    func commandEvents() throws -> [Event] {
        try events().filter {
            switch $0 {
            case .commandRequested, .commandSent, .commandDeliveryFailed, .commandAnswered, .commandExpired,
                .pushTokenInvalidated:
                true
            default: false
            }
        }
    }

    func close() {
        identity.store.writer.close()
        try? FileManager.default.removeItem(atPath: directory)
    }
}

@Suite struct CommandServiceTests {
    /// Runs the worker's rounds until it holds nothing (the fake answers at once).
    func settle(_ service: CommandService) {
        service.runDue()
        for _ in 0..<10 where !service.isIdle { service.runDue() }
    }

    @Test func everyOutcomeOfEveryAddressIsWrittenAndDeadTokensInvalidated() throws {
        let scratch = try Scratch()
        defer { scratch.close() }
        _ = try scratch.identity.appendAndApply(
            .pushTokenRegistered(
                PushTokenRegistered(
                    deviceID: 1, provider: "fcm", token: "dead-token", topic: "", environment: "")),
            receivedAtMicros: scratch.clock.nowMicros)
        let apns = RecordingProvider(
            name: "apns", addresses: [ChannelAddress(provider: "apns", token: "a1", topic: "org.app")],
            script: [.retry(afterSeconds: 5, reason: "429 TooManyRequests"), .sent(providerID: "apns-id-1")])
        let fcm = RecordingProvider(
            name: "fcm", addresses: [ChannelAddress(provider: "fcm", token: "dead-token")],
            script: [.addressDead(reason: "UNREGISTERED")])
        let service = CommandService(
            identity: scratch.identity, channels: [apns, fcm], clockMicros: scratch.now)
        let requested = try service.request(deviceID: 1, userID: 1, kind: .locate, message: nil, phone: nil)
        settle(service)
        // Both channels, in order, each asked once; the retry waits for its time.
        #expect(apns.askedCount == 1 && fcm.askedCount == 1)
        #expect(apns.asked.first?.0.commandID == requested.commandID.description)
        let retryAt = try #require(service.nextRetryMicros)
        #expect(retryAt == scratch.clock.nowMicros + 5_000_000)
        scratch.clock.advance(seconds: 4)
        settle(service)
        #expect(apns.askedCount == 1)
        scratch.clock.advance(seconds: 1)
        settle(service)
        #expect(apns.askedCount == 2)

        let id = requested.commandID
        let expected: [Event] = [
            .commandRequested(
                CommandRequested(
                    commandID: id, deviceID: 1, kind: .locate, requestedByUserID: 1,
                    requestedAtMicros: requested.requestedAtMicros)),
            .commandDeliveryFailed(
                CommandDeliveryFailed(
                    commandID: id, deviceID: 1, channel: "apns", reason: "429 TooManyRequests",
                    retryAtMicros: retryAt,
                    addressDead: false)),
            .commandDeliveryFailed(
                CommandDeliveryFailed(
                    commandID: id, deviceID: 1, channel: "fcm", reason: "UNREGISTERED", retryAtMicros: nil,
                    addressDead: true)),
            .pushTokenInvalidated(
                PushTokenInvalidated(provider: "fcm", token: "dead-token", reason: "UNREGISTERED")),
            .commandSent(CommandSent(commandID: id, deviceID: 1, channel: "apns", providerID: "apns-id-1")),
        ]
        let written = try scratch.commandEvents()
        #expect(written == expected, "\(written.map { "\($0)" }.joined(separator: "\n"))")
        #expect(scratch.identity.registrySnapshot.pushTokens(deviceID: 1).isEmpty)
    }

    @Test func retriesAreBoundedAndEndAsFailed() throws {
        let scratch = try Scratch()
        defer { scratch.close() }
        var limits = CommandLimits()
        limits.deliveryAttemptsMax = 3
        let busy = RecordingProvider(
            name: "unifiedpush",
            addresses: [ChannelAddress(provider: "unifiedpush", token: "https://push/x")],
            script: Array(repeating: .retry(afterSeconds: 2, reason: "503"), count: 10))
        let service = CommandService(
            identity: scratch.identity, channels: [busy], limits: limits, clockMicros: scratch.now)
        _ = try service.request(deviceID: 1, userID: 1, kind: .sound, message: nil, phone: nil)
        for _ in 0..<6 {
            settle(service)
            scratch.clock.advance(seconds: 2)
        }
        #expect(busy.askedCount == 3)
        let failures = try scratch.commandEvents().compactMap { event -> CommandDeliveryFailed? in
            if case .commandDeliveryFailed(let failed) = event { return failed }
            return nil
        }
        #expect(failures.map { $0.retryAtMicros == nil } == [false, false, true])
        #expect(failures.last?.reason == "503 (gave up after 3 attempts)")
        #expect(service.nextRetryMicros == nil)
    }

    @Test func theRateLimitAnswersWithTheWaitAndPassesAfterIt() throws {
        let scratch = try Scratch()
        defer { scratch.close() }
        let service = CommandService(identity: scratch.identity, channels: [], clockMicros: scratch.now)
        _ = try service.request(deviceID: 1, userID: 1, kind: .locate, message: nil, phone: nil)
        scratch.clock.advance(seconds: 10)
        #expect(throws: CommandRefusal.rateLimited(retryAfterSeconds: 20, kind: .locate, intervalSeconds: 30))
        {
            try service.request(deviceID: 1, userID: 1, kind: .locate, message: nil, phone: nil)
        }
        // Another kind has its own limit.
        _ = try service.request(deviceID: 1, userID: 1, kind: .sound, message: nil, phone: nil)
        let refused = try #require(
            throws: CommandRefusal.self,
            performing: {
                try service.request(deviceID: 1, userID: 1, kind: .locate, message: nil, phone: nil)
            })
        #expect(refused.response.status == 429 && refused.response.headers["Retry-After"] == "20")
        scratch.clock.advance(seconds: 20)
        _ = try service.request(deviceID: 1, userID: 1, kind: .locate, message: nil, phone: nil)
    }

    @Test func commandsExpireByKindAndFoundEndsLost() throws {
        let scratch = try Scratch()
        defer { scratch.close() }
        let service = CommandService(identity: scratch.identity, channels: [], clockMicros: scratch.now)
        let locate = try service.request(deviceID: 1, userID: 1, kind: .locate, message: nil, phone: nil)
        let lost = try service.request(
            deviceID: 1, userID: 1, kind: .lost, message: "Please call", phone: "+49 30 123")
        scratch.clock.advance(seconds: 299)
        service.runDue()
        #expect(scratch.identity.registrySnapshot.commands.open(deviceID: 1).count == 2)
        scratch.clock.advance(seconds: 1)
        service.runDue()
        let open = scratch.identity.registrySnapshot.commands.open(deviceID: 1)
        #expect(open.map(\.request.commandID) == [lost.commandID])
        // A lost never expires by time; a found ends it.
        scratch.clock.advance(seconds: 86_400)
        service.runDue()
        #expect(scratch.identity.registrySnapshot.commands.lost(deviceID: 1) != nil)
        let found = try service.request(deviceID: 1, userID: 1, kind: .found, message: nil, phone: nil)
        #expect(scratch.identity.registrySnapshot.commands.lost(deviceID: 1) == nil)
        let ends = try scratch.commandEvents().compactMap { event -> CommandExpired? in
            if case .commandExpired(let expired) = event { return expired }
            return nil
        }
        #expect(
            ends == [
                CommandExpired(commandID: locate.commandID, deviceID: 1, reason: "no answer within 300 s"),
                CommandExpired(commandID: lost.commandID, deviceID: 1, reason: "found"),
            ])
        #expect(
            scratch.identity.registrySnapshot.commands.open(deviceID: 1).map(\.request.commandID) == [
                found.commandID
            ])
    }

    @Test func messageAndPhoneAreForLostOnly() throws {
        let scratch = try Scratch()
        defer { scratch.close() }
        let service = CommandService(identity: scratch.identity, channels: [], clockMicros: scratch.now)
        let refused = try #require(
            throws: CommandRefusal.self,
            performing: {
                try service.request(deviceID: 1, userID: 1, kind: .locate, message: "hi", phone: nil)
            })
        #expect(refused.response.status == 400)
    }
}

extension CommandServiceTests {
    /// An open command is handed, when the service starts again, to each channel that has not
    /// taken it: none took it before the server stopped, or a channel's retry was waiting (retries
    /// live in memory); a channel that took it is not asked twice.
    @Test func aStartHandsOpenCommandsToTheChannelsThatHaveNotTakenThem() throws {
        let scratch = try Scratch()
        defer { scratch.close() }
        let before = CommandService(identity: scratch.identity, channels: [], clockMicros: scratch.now)
        let unsent = try before.request(deviceID: 1, userID: 1, kind: .sound, message: nil, phone: nil)
        scratch.clock.advance(seconds: 1)  // handed on oldest first
        let retrying = try before.request(deviceID: 1, userID: 1, kind: .locate, message: nil, phone: nil)
        let lost = try before.request(deviceID: 1, userID: 1, kind: .lost, message: "hi", phone: nil)
        // The locate went out through APNs and a report answer; FCM's attempt waited for a retry.
        for channel in ["apns", "report-answer"] {
            _ = try scratch.identity.appendAndApply(
                .commandSent(CommandSent(commandID: retrying.commandID, deviceID: 1, channel: channel)),
                receivedAtMicros: scratch.clock.nowMicros)
        }
        _ = try scratch.identity.appendAndApply(
            .commandDeliveryFailed(
                CommandDeliveryFailed(
                    commandID: retrying.commandID, deviceID: 1, channel: "fcm", reason: "FCM 503 UNAVAILABLE",
                    retryAtMicros: scratch.clock.nowMicros + 600_000_000, addressDead: false)),
            receivedAtMicros: scratch.clock.nowMicros)
        // The lost was taken by both.
        for channel in ["apns", "fcm"] {
            _ = try scratch.identity.appendAndApply(
                .commandSent(CommandSent(commandID: lost.commandID, deviceID: 1, channel: channel)),
                receivedAtMicros: scratch.clock.nowMicros)
        }

        let apns = RecordingProvider(
            name: "apns", addresses: [ChannelAddress(provider: "apns", token: "a")], script: [])
        let fcm = RecordingProvider(
            name: "fcm", addresses: [ChannelAddress(provider: "fcm", token: "t")], script: [])
        let after = CommandService(
            identity: scratch.identity, channels: [apns, fcm], clockMicros: scratch.now)
        try after.start()
        defer { after.stop(graceMicros: 0) }
        let deadline = Date().addingTimeInterval(30)
        while (apns.askedCount < 1 || fcm.askedCount < 2) && Date() < deadline { usleep(1_000) }
        #expect(apns.asked.map(\.0.commandID) == [unsent.commandID.description])
        #expect(
            fcm.asked.map(\.0.commandID) == [unsent.commandID.description, retrying.commandID.description])
        #expect(fcm.asked.first?.0.kind == .sound)
    }
}

extension CommandServiceTests {
    /// A channel's follow-up (APNs' alert after a background push) goes out once its wait is over
    /// on the injected clock, and only while the command is unanswered.
    @Test func aFollowUpWaitsAndIsDroppedOnceTheCommandIsAnswered() throws {
        let scratch = try Scratch()
        defer { scratch.close() }
        let apns = RecordingProvider(
            name: "apns", addresses: [ChannelAddress(provider: "apns", token: "a1", topic: "org.app")],
            script: [
                .sentWithFollowUp(providerID: "background-1", afterSeconds: 30), .sent(providerID: "alert-1"),
                .sentWithFollowUp(providerID: "background-2", afterSeconds: 30),
            ])
        let service = CommandService(identity: scratch.identity, channels: [apns], clockMicros: scratch.now)

        // Unanswered: the alert follows after 30 s, not before.
        let unanswered = try service.request(deviceID: 1, userID: 1, kind: .locate, message: nil, phone: nil)
        settle(service)
        #expect(apns.asked.map(\.0.followUp) == [false])
        scratch.clock.advance(seconds: 29)
        settle(service)
        #expect(apns.askedCount == 1)
        scratch.clock.advance(seconds: 1)
        settle(service)
        #expect(apns.asked.map(\.0.followUp) == [false, true])
        #expect(apns.asked.last?.0.commandID == unanswered.commandID.description)
        let sent = try scratch.commandEvents().compactMap { event -> String? in
            if case .commandSent(let sent) = event { return sent.providerID }
            return nil
        }
        #expect(sent == ["background-1", "alert-1"])

        // Answered within the wait: no alert.
        scratch.clock.advance(seconds: 60)
        let answered = try service.request(deviceID: 1, userID: 1, kind: .locate, message: nil, phone: nil)
        settle(service)
        #expect(apns.askedCount == 3)
        scratch.clock.advance(seconds: 10)
        _ = try scratch.identity.appendAndApply(
            .commandAnswered(
                CommandAnswered(
                    commandID: answered.commandID, deviceID: 1, batchOffset: 0, fixIndex: 0,
                    clientProtocol: .native)),
            receivedAtMicros: scratch.clock.nowMicros)
        scratch.clock.advance(seconds: 20)
        settle(service)
        #expect(apns.askedCount == 3)
        #expect(service.nextRetryMicros == nil)
    }
}

/// Answers every delivery at once with `.sent`, and notes for each whether the registry held
/// any `command_sent` yet when the delivery was asked for.
final class StoredAtDeliveryProvider: CommandChannel, @unchecked Sendable {
    let name = "apns"
    let identity: IdentityService
    let addressList: [ChannelAddress]
    private let lock = NSLock()
    private(set) var asked: [(commandID: String, sentStoredBefore: Bool)] = []

    init(identity: IdentityService, addresses: [ChannelAddress]) {
        self.identity = identity
        self.addressList = addresses
    }

    func addresses(forDevice deviceID: UInt64) -> [ChannelAddress] { addressList }

    func deliver(
        _ delivery: CommandDelivery, to address: ChannelAddress,
        completion: @escaping @Sendable (DeliveryOutcome) -> Void
    ) {
        let stored = identity.registrySnapshot.commands.open.values.contains { !$0.sentChannels.isEmpty }
        lock.withLock { asked.append((delivery.commandID, stored)) }
        completion(.sent(providerID: nil))
    }
}

extension CommandServiceTests {
    /// The outcomes a round stores go to the log in one group commit, not one fdatasync each: at
    /// 1,000 commands/s the worker's one-at-a-time appends, each waiting its turn on the identity
    /// lock behind the API's requests, held new commands back for seconds (docs/benchmarks.md,
    /// "Commands through the API"). And a new command goes to the channels before the round writes
    /// what came back from earlier ones: its push waits for no fdatasync.
    @Test func aRoundStoresItsOutcomesInOneGroupCommitAfterHandingOnNewCommands() throws {
        let scratch = try Scratch()
        defer { scratch.close() }
        let outcomesCount = 20
        let addresses = (0..<outcomesCount).map { ChannelAddress(provider: "apns", token: "t\($0)") }
        let provider = StoredAtDeliveryProvider(identity: scratch.identity, addresses: addresses)
        let service = CommandService(
            identity: scratch.identity, channels: [provider], clockMicros: scratch.now)
        let first = try service.request(deviceID: 1, userID: 1, kind: .sound, message: nil, phone: nil)
        service.runDue()  // hands it to 20 addresses; their 20 outcomes wait for the next round
        #expect(provider.asked.count == outcomesCount)
        let second = try service.request(deviceID: 1, userID: 1, kind: .lost, message: nil, phone: nil)
        let commitsBefore = scratch.identity.store.writer.statistics.groupCommits
        service.runDue()
        let commits = scratch.identity.store.writer.statistics.groupCommits - commitsBefore
        #expect(commits <= 3, "\(commits) group commits for \(outcomesCount) outcomes")
        let sent = try scratch.commandEvents().compactMap { event -> String? in
            if case .commandSent(let sent) = event { return sent.commandID.description }
            return nil
        }
        #expect(sent.count == outcomesCount && sent.allSatisfy { $0 == first.commandID.description })
        // The second command went out in the same round, before those outcomes were written.
        let secondAsked = provider.asked.dropFirst(outcomesCount)
        #expect(secondAsked.count == outcomesCount)
        #expect(
            secondAsked.allSatisfy { $0.commandID == second.commandID.description && !$0.sentStoredBefore })
    }
}

extension CommandServiceTests {
    /// Two commands' outcomes stored in one round both find the same push token dead: the log says
    /// once that it ended.
    @Test func aTokenTwoOutcomesOfOneRoundFindDeadIsInvalidatedOnce() throws {
        let scratch = try Scratch()
        defer { scratch.close() }
        _ = try scratch.identity.appendAndApply(
            .pushTokenRegistered(
                PushTokenRegistered(
                    deviceID: 1, provider: "fcm", token: "dead-token", topic: "", environment: "")),
            receivedAtMicros: scratch.clock.nowMicros)
        let fcm = RecordingProvider(
            name: "fcm", addresses: [ChannelAddress(provider: "fcm", token: "dead-token")],
            script: [.addressDead(reason: "UNREGISTERED"), .addressDead(reason: "UNREGISTERED")])
        let service = CommandService(identity: scratch.identity, channels: [fcm], clockMicros: scratch.now)
        _ = try service.request(deviceID: 1, userID: 1, kind: .sound, message: nil, phone: nil)
        _ = try service.request(deviceID: 1, userID: 1, kind: .locate, message: nil, phone: nil)
        settle(service)
        #expect(fcm.askedCount == 2)
        let invalidated = try scratch.commandEvents().filter {
            if case .pushTokenInvalidated = $0 { return true }
            return false
        }
        #expect(invalidated.count == 1, "\(invalidated)")
        #expect(scratch.identity.registrySnapshot.pushTokens(deviceID: 1).isEmpty)
    }
}
