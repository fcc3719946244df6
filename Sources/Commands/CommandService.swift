import Core
import Events
import HTTP
import Identity
import Synchronization
import Threads

/// Commands to devices (docs/commands.md): takes a request (who may was decided by the gate's
/// `.locator`), applies the per-device rate limit, appends `command_requested`, and hands the
/// command to every channel that can reach the device, writing each step to the log. It also ends
/// commands whose time ran out (`command_expired`) and retries what a provider asked to retry.
///
/// Order and fallback: every channel in the order given (`findmy serve` passes APNs, FCM,
/// UnifiedPush, OwnTracks MQTT), every address each one names, all of them: a provider's 200 says
/// only that it took the push, not that the phone got it, so stopping at the first "sent" would
/// trade a better chance of an answer for nothing. Besides these, the device's own report answers
/// carry its open commands (Ingest, Clients), which needs no channel at all.
///
/// Threads: `request` runs on the caller's thread and appends under the identity's mutations lock
/// (the rate limit is checked and the request appended as one step). Everything else runs on the
/// service's one worker thread: channels answer on their own threads, and their outcomes are
/// queued and appended here, in the order they came, with the blocking append.
public final class CommandService: Service {
    public let name = "commands"
    public let identity: IdentityService
    public let channels: [any CommandChannel]
    public let limits: CommandLimits
    let clockMicros: @Sendable () -> Int64
    private let work = Mutex(Work())
    private let bell = Doorbell()
    private let worker = StoppableThread()

    struct Attempt: Sendable {
        var delivery: CommandDelivery
        var channel: Int
        var address: ChannelAddress
        /// 1 for the first attempt through this address.
        var number: Int
    }

    /// A command to hand to the channels, but those named in `skipping` (which took it already).
    struct Fresh {
        var delivery: CommandDelivery
        var skipping: [String] = []
    }

    struct Work {
        var fresh: [Fresh] = []
        var outcomes: [(Attempt, DeliveryOutcome)] = []
        /// Attempts waiting for their time, by due time (wall clock, the injected one): retries, and
        /// channels' follow-ups (`.sentWithFollowUp`).
        var retries: [(dueMicros: Int64, attempt: Attempt)] = []
        /// Attempts handed to a channel and not answered yet.
        var inFlight = 0
    }

    public init(
        identity: IdentityService, channels: [any CommandChannel], limits: CommandLimits = CommandLimits(),
        clockMicros: @escaping @Sendable () -> Int64 = wallClockMicros
    ) {
        self.identity = identity
        self.channels = channels
        self.limits = limits
        self.clockMicros = clockMicros
    }

    // MARK: requests

    public struct Requested: Sendable, Equatable {
        public var commandID: UUID128
        public var kind: CommandKind
        public var requestedAtMicros: Int64
        /// The log offset of `command_requested`: a read with `after_offset` sees it.
        public var offset: UInt64
    }

    /// Appends a command to `deviceID` from `userID`, or throws why not (400 for a bad message or
    /// phone, 429 with `retryAfterSeconds` over the rate limit, 503 when the log cannot store it).
    /// A `found` ends the device's open `lost` (`command_expired`, reason `found`), and a new `lost`
    /// the earlier one (reason `replaced`).
    public func request(
        deviceID: UInt64, userID: UInt64, kind: CommandKind, message: String?, phone: String?
    ) throws(CommandRefusal) -> Requested {
        if kind != .lost, message != nil || phone != nil {
            throw .invalid(.badRequest(.invalidField, "message and phone are for kind \"lost\" only"))
        }
        try check(message, field: "message", bytesMax: limits.messageBytesMax)
        try check(phone, field: "phone", bytesMax: limits.phoneBytesMax)
        let now = clockMicros()
        let code = kind.code
        let interval = Int64(limits.intervalSeconds(code)) * 1_000_000
        let requested: Requested
        do {
            requested = try identity.store.mutations.withLock { _ throws(CommandRefusal) -> Requested in
                let (last, ending) = identity.store.registry.read { state -> (Int64?, [CommandBook.Open]) in
                    let book = state.registry.commands
                    let open = book.open(deviceID: deviceID)
                    let ending =
                        kind == .found || kind == .lost ? open.filter { $0.request.kind == .lost } : []
                    return (book.lastRequested[CommandBook.KindKey(deviceID: deviceID, kind: code)], ending)
                }
                if let last, now < last + interval {
                    let waitSeconds = Int((last + interval - now + 999_999) / 1_000_000)
                    throw .rateLimited(
                        retryAfterSeconds: max(1, waitSeconds), kind: kind,
                        intervalSeconds: limits.intervalSeconds(code))
                }
                let id = UUID128.random()
                do throws(APIError) {
                    for lost in ending {
                        _ = try identity.appendAndApply(
                            .commandExpired(
                                CommandExpired(
                                    commandID: lost.request.commandID, deviceID: deviceID,
                                    reason: kind == .found ? "found" : "replaced by a newer lost")),
                            receivedAtMicros: now)
                    }
                    let offset = try identity.appendAndApply(
                        .commandRequested(
                            CommandRequested(
                                commandID: id, deviceID: deviceID, kind: code, message: message ?? "",
                                phone: phone ?? "", requestedByUserID: userID, requestedAtMicros: now)),
                        receivedAtMicros: now)
                    return Requested(commandID: id, kind: kind, requestedAtMicros: now, offset: offset)
                } catch {
                    throw .invalid(error)
                }
            }
        }
        StructuredLog.info(
            "command_requested",
            [
                "device_id": .int(Int64(deviceID)), "user_id": .int(Int64(userID)),
                "kind": .string(kind.rawValue),
                "command_id": .string(requested.commandID.description),
            ])
        let delivery = CommandDelivery(
            commandID: requested.commandID.description, kind: kind, deviceID: deviceID, message: message,
            phone: phone)
        work.withLock { $0.fresh.append(Fresh(delivery: delivery)) }
        bell.ring()
        return requested
    }

    private func check(_ text: String?, field: String, bytesMax: Int) throws(CommandRefusal) {
        guard let text else { return }
        guard text.utf8.count <= bytesMax else {
            throw .invalid(.badRequest(.invalidField, "\(field) is longer than \(bytesMax) bytes"))
        }
        guard !text.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) else {
            throw .invalid(.badRequest(.invalidField, "\(field) must not contain control characters"))
        }
    }

    // MARK: the worker

    public var state: ServiceState {
        worker.isRunning ? .running : (worker.stopSignal.isRequested ? .stopped : .idle)
    }

    /// Starts the worker. Every open command is handed again to each channel that has not taken it
    /// (no `command_sent` of that channel): the server stopped before the outcome was stored, or
    /// while a retry waited for its time (retries live in memory only; the log's
    /// `command_delivery_failed` says when, but the registry keeps no failures, so the retry goes
    /// at once rather than at its time).
    public func start() throws {
        let names = Set(channels.map(\.name))
        let open = identity.store.registry.read { state in
            state.registry.commands.open.values.filter { !names.isSubset(of: $0.sentChannels) }
        }
        work.withLock {
            $0.fresh += open.sorted { $0.request.requestedAtMicros < $1.request.requestedAtMicros }.map {
                Fresh(delivery: Self.delivery($0.request), skipping: $0.sentChannels)
            }
        }
        let bell = self.bell
        worker.start { [self] stop in
            stop.addDoorbell(bell)
            defer { stop.removeDoorbell(bell) }
            while !stop.isRequested {
                runDue()
                // Expiry and retries are due by the (injected) wall clock: look again each second.
                _ = bell.wait(untilMonotonicMicros: monotonicMicros() + 1_000_000)
            }
        }
    }

    public func stop(graceMicros: Int64) { worker.stop() }

    static func delivery(_ request: CommandRequested) -> CommandDelivery {
        CommandDelivery(
            commandID: request.commandID.description, kind: CommandKind(request.kind),
            deviceID: request.deviceID,
            message: request.kind == .lost ? request.message : nil,
            phone: request.kind == .lost ? request.phone : nil)
    }

    /// One round of the worker, also what tests call with their clock: hands new commands and due
    /// retries to the channels, stores the outcomes that came back, and ends expired commands.
    public func runDue() {
        let now = clockMicros()
        let (fresh, outcomes, due) = work.withLock { work in
            let fresh = work.fresh
            let outcomes = work.outcomes
            work.fresh = []
            work.outcomes = []
            let due = work.retries.filter { $0.dueMicros <= now }.map(\.attempt)
            work.retries.removeAll { $0.dueMicros <= now }
            return (fresh, outcomes, due)
        }
        // New commands first: their pushes wait for no fdatasync of earlier outcomes.
        for item in fresh {
            let delivery = item.delivery
            let registrations = identity.pushRegistrations(deviceID: delivery.deviceID)
            for (index, channel) in channels.enumerated() where !item.skipping.contains(channel.name) {
                for address in channel.addresses(
                    forDevice: delivery.deviceID, kind: delivery.kind, registrations: registrations)
                {
                    send(Attempt(delivery: delivery, channel: index, address: address, number: 1))
                }
            }
        }
        for attempt in due where isOpen(attempt.delivery) { send(attempt) }
        // One group commit for every outcome of the round: appended one at a time, each waited its
        // turn on the registry store's mutation lock behind the API's requests, and the round with it.
        append(outcomes.flatMap { store($0.1, of: $0.0, now: now) }, now: now)
        expire(now: now)
    }

    /// Whether the worker has nothing in hand: no new command, no outcome to store, no attempt in
    /// flight. Retries and follow-ups waiting for their time do not count.
    public var isIdle: Bool { work.withLock { $0.fresh.isEmpty && $0.outcomes.isEmpty && $0.inFlight == 0 } }

    /// The earliest retry or follow-up waiting, for tests that move their clock to it.
    public var nextRetryMicros: Int64? { work.withLock { $0.retries.map(\.dueMicros).min() } }

    private func isOpen(_ delivery: CommandDelivery) -> Bool {
        guard let id = UUID128(delivery.commandID) else { return false }
        return identity.store.registry.read { $0.registry.commands.open[id] != nil }
    }

    private func send(_ attempt: Attempt) {
        work.withLock { $0.inFlight += 1 }
        channels[attempt.channel].deliver(attempt.delivery, to: attempt.address) { [self] outcome in
            work.withLock {
                $0.inFlight -= 1
                $0.outcomes.append((attempt, outcome))
            }
            bell.ring()
        }
    }

    /// The events that record `outcome`; a retry is queued for its time.
    private func store(_ outcome: DeliveryOutcome, of attempt: Attempt, now: Int64) -> [Event] {
        let delivery = attempt.delivery
        guard let id = UUID128(delivery.commandID) else { return [] }
        let channel = channels[attempt.channel].name
        func failed(_ reason: String, retryAt: Int64?, dead: Bool) -> Event {
            .commandDeliveryFailed(
                CommandDeliveryFailed(
                    commandID: id, deviceID: delivery.deviceID, channel: channel, reason: reason,
                    retryAtMicros: retryAt,
                    addressDead: dead))
        }
        var events: [Event] = []
        switch outcome {
        case .sent(let providerID):
            events.append(
                .commandSent(
                    CommandSent(
                        commandID: id, deviceID: delivery.deviceID, channel: channel,
                        providerID: providerID ?? "")))
        case .sentWithFollowUp(let providerID, let afterSeconds):
            events.append(
                .commandSent(
                    CommandSent(
                        commandID: id, deviceID: delivery.deviceID, channel: channel,
                        providerID: providerID ?? "")))
            // Waits with the retries: due by the same clock, and dropped alike once the command closed.
            var next = attempt
            next.delivery.followUp = true
            next.number = 1
            let due = now + Int64(max(afterSeconds, 0)) * 1_000_000
            work.withLock { $0.retries.append((due, next)) }
        case .addressDead(let reason):
            events.append(failed(reason, retryAt: nil, dead: true))
            let key = Registry.PushKey(provider: attempt.address.provider, token: attempt.address.token)
            // Only a registered push token is invalidated; an MQTT topic is no push token.
            if identity.store.registry.read({ $0.registry.pushTokens[key] != nil }) {
                events.append(
                    .pushTokenInvalidated(
                        PushTokenInvalidated(provider: key.provider, token: key.token, reason: reason)))
            }
        case .retry(let afterSeconds, let reason):
            if attempt.number < limits.deliveryAttemptsMax {
                let due = now + Int64(min(max(afterSeconds, 1), limits.retryAfterSecondsMax)) * 1_000_000
                events.append(failed(reason, retryAt: due, dead: false))
                var next = attempt
                next.number += 1
                work.withLock { $0.retries.append((due, next)) }
            } else {
                events.append(
                    failed(reason + " (gave up after \(attempt.number) attempts)", retryAt: nil, dead: false))
            }
        case .failed(let reason):
            events.append(failed(reason, retryAt: nil, dead: false))
        }
        return events
    }

    /// Ends the commands whose time ran out, and those whose requester may no longer command the
    /// device (`Registry.mayCommand`: the share that let them ended), which the device must not
    /// act on any more.
    private func expire(now: Int64) {
        let open = identity.store.registry.read { state in
            state.registry.commands.open.values.map {
                (
                    request: $0.request,
                    allowed: state.registry.mayCommand(
                        $0.request.deviceID, user: $0.request.requestedByUserID, atMicros: now)
                )
            }
        }
        var ended: [Event] = []
        for (request, allowed) in open {
            if !allowed {
                ended.append(
                    .commandExpired(
                        CommandExpired(
                            commandID: request.commandID, deviceID: request.deviceID,
                            reason: "the requester may no longer command this device (the share ended)")))
                continue
            }
            guard let seconds = limits.expirySeconds(request.kind),
                now >= request.requestedAtMicros + Int64(seconds) * 1_000_000
            else { continue }
            ended.append(
                .commandExpired(
                    CommandExpired(
                        commandID: request.commandID, deviceID: request.deviceID,
                        reason: "no answer within \(seconds) s")))
        }
        append(ended, now: now)
    }

    /// Appends `events` in order, queued together so that they share a group commit, and applies
    /// them once durable, all under the store's mutation lock (applied in log order).
    private func append(_ events: [Event], now: Int64) {
        guard !events.isEmpty else { return }
        identity.store.mutations.withLock { _ in
            // An answer may have closed the command meanwhile: an expiry then says nothing true. Two
            // outcomes of one round may end the same push token: it is invalidated once. On a
            // shared log every node's dispatcher expires the same commands: an expiry is decided
            // only on a registry that has folded the whole log, so one another node stored is seen
            // here, and one in flight has the same Msg-Id (SharedRegistry.endMessageID), so
            // JetStream stores one; a node that could not catch up expires nothing this round.
            let seesWholeLog = identity.store.decisionSeesWholeLog
            var invalidated = Set<Registry.PushKey>()
            let kept = events.filter { event in
                switch event {
                case .commandExpired(let expired):
                    return seesWholeLog
                        && identity.store.registry.read {
                            $0.registry.commands.open[expired.commandID] != nil
                        }
                case .pushTokenInvalidated(let ended):
                    return invalidated.insert(Registry.PushKey(provider: ended.provider, token: ended.token))
                        .inserted
                default:
                    return true
                }
            }
            let results = Locked([Result<UInt64, AppendFailure>?](repeating: nil, count: kept.count))
            let done = ConditionLock()
            for (index, event) in kept.enumerated() {
                identity.store.append(
                    EventCodec.encode(event, receivedAtMicros: now),
                    messageID: SharedRegistry.endMessageID(event)
                ) { result in
                    done.withLock {
                        results.withLock { $0[index] = result }
                        done.broadcast()
                    }
                }
            }
            let outcomes = done.withLock {
                while results.withLock({ $0.contains { $0 == nil } }) { done.wait() }
                return results.withLock { $0 }
            }
            identity.store.registry.write { state in
                for (event, outcome) in zip(kept, outcomes) {
                    if case .success(let offset)? = outcome { state.registry.apply(event, offset: offset) }
                }
            }
            for case .failure(let error)? in outcomes {
                // The log refused (disk full, I/O): /healthz says so; the step is lost, not invented.
                StructuredLog.error(
                    "command_event_not_stored", ["error": .string(APIError(error).description)])
            }
        }
    }
}

/// Why a command was not taken.
public enum CommandRefusal: Error, Equatable, Sendable {
    case invalid(APIError)
    /// Over the device's rate limit for this kind.
    case rateLimited(retryAfterSeconds: Int, kind: CommandKind, intervalSeconds: Int)

    public var response: HTTPResponse {
        switch self {
        case .invalid(let error): return error.response
        case .rateLimited(let retryAfterSeconds, let kind, let intervalSeconds):
            var response = APIError(
                status: 429, code: .commandRateLimited,
                message:
                    "this device was sent a \(kind.rawValue) less than \(intervalSeconds) s ago; wait \(retryAfterSeconds) s (Retry-After) and ask again, or follow the earlier command with GET .../commands"
            ).response
            response.headers.set("Retry-After", "\(retryAfterSeconds)")
            return response
        }
    }
}
