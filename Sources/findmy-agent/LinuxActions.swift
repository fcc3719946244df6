// What a Linux device does for `sound` and `lost`: the alarm through a local program, again and
// again until stopped or its limit; the lost message in the log and on the desktop.
import FindMyClient
import Threads

#if canImport(Glibc)
    import Glibc
#endif

/// `DeviceActions` for Linux (docs/agent.md, "What each command does").
///
/// The alarm: SoundPlayer's choice (the `--sound-command`, `paplay` of the freedesktop alarm, ALSA's
/// `aplay` of AlarmTone, the terminal bell), played on a thread of its own, again as soon as it
/// ends (a play starts at most once a second, so that a command that ends at once or fails does not
/// spin), until `stopSound`, the limit, or a `found`. Each play is a child process in a process
/// group of its own under `setpriv --pdeathsig KILL` (Threads' spawner): a stop or the limit kills
/// the group (a shell's children too), and the agent dying kills the player. `stopSound` returns
/// once nothing plays and nothing will.
///
/// Lost: the message and number go to the log (standard error: the terminal, or the journal under
/// systemd), and, where a desktop session bus is there and `notify-send` is installed, to a
/// critical notification, which desktops keep on screen until it is dismissed; `clearLost` closes it.
final class LinuxDeviceActions: DeviceActions, @unchecked Sendable {
    /// Plays start at most this often.
    static let playIntervalMicrosMin: Int64 = 1_000_000

    let soundCommand: [String]?
    let stateDirectory: String?
    private let environment: [String: String]?
    private let log: @Sendable (String) -> Void
    private let lock = ConditionLock()
    // Under `lock`: the alarm (the command it answers, its deadline on the monotonic clock, whether
    // its thread runs and a stop is asked for), the play running now, and the lost message shown.
    private var soundCommandID: String?
    private var soundDeadlineMicros: Int64 = 0
    private var loopRunning = false
    private var stopRequested = false
    private var playerStatus: Int32?
    private var lost: LostMessage?

    private struct LostMessage {
        var commandID: String
        var message: String
        var phone: String
        var notificationID: String?
    }

    /// `environment`: the variables that say what the session has (PATH, DBUS_SESSION_BUS_ADDRESS,
    /// XDG_RUNTIME_DIR, PULSE_SERVER); nil for this process's own.
    init(
        soundCommand: [String]?, stateDirectory: String? = nil, environment: [String: String]? = nil,
        log: @escaping @Sendable (String) -> Void
    ) {
        self.soundCommand = soundCommand
        self.stateDirectory = stateDirectory
        self.environment = environment
        self.log = log
    }

    var isPlaying: Bool { lock.withLock { loopRunning } }
    var lostMessage: String? { lock.withLock { lost?.message } }

    // MARK: The alarm

    func startSound(commandID: String, limitSeconds: Double) {
        let deadline = monotonicMicros() + Int64(max(0, limitSeconds) * 1_000_000)
        let startsThread = lock.withLock {
            soundCommandID = commandID
            soundDeadlineMicros = deadline
            stopRequested = false
            lock.broadcast()
            guard !loopRunning else { return false }
            loopRunning = true
            return true
        }
        let limit = Int(limitSeconds.rounded())
        guard startsThread else {
            log("sound: already playing; command \(commandID) keeps it going for at most \(limit) s from now")
            return
        }
        log("sound: alarm for command \(commandID), for at most \(limit) s")
        pthread_detach(spawnThread { [self] in soundLoop() })
    }

    func stopSound() {
        lock.withLock {
            guard loopRunning else { return }
            stopRequested = true
            lock.broadcast()
            while loopRunning && stopRequested { lock.wait() }
        }
    }

    private func soundLoop() {
        let player = choosePlayer()
        log("sound: playing with \(player)")
        var nextStart = monotonicMicros()
        var reason: String
        while true {
            if let ended = waitForTurn(at: nextStart) {
                reason = ended
                break
            }
            nextStart = monotonicMicros() + Self.playIntervalMicrosMin
            switch player {
            case .bell: ringBell()
            case .command(let argv): play(argv)
            }
        }
        let commandID = lock.withLock {
            defer {
                loopRunning = false
                soundCommandID = nil
                lock.broadcast()
            }
            return soundCommandID ?? ""
        }
        log("sound: stopped for command \(commandID): \(reason)")
    }

    /// Sleeps until `start` (monotonic); nil then, or why the alarm ends (a stop, its limit).
    private func waitForTurn(at start: Int64) -> String? {
        lock.withLock {
            while true {
                if stopRequested { return "stopped" }
                let now = monotonicMicros()
                if now >= soundDeadlineMicros { return "its time limit was reached" }
                if now >= start { return nil }
                _ = lock.wait(0, untilMonotonicMicros: min(start, soundDeadlineMicros))
            }
        }
    }

    private func choosePlayer() -> SoundPlayer {
        let tonePath = (stateDirectory ?? temporaryDirectory()) + "/alarm.wav"
        let player = SoundPlayer.choose(
            soundCommand: soundCommand,
            audio: soundCommand == nil ? AudioSystem.detect(environment: variable) : .none,
            tonePath: tonePath)
        if case .command(let argv) = player, argv.last == tonePath, !writeTone(to: tonePath) {
            return .bell
        }
        return player
    }

    /// Runs one play to its end, or kills it (its process group) on a stop or at the limit.
    private func play(_ argv: [String]) {
        let program = [setprivPath, "--pdeathsig", "KILL", "--"] + argv
        let pid: pid_t
        do {
            pid = try spawnChild(program, outputPath: playerOutputPath)
        } catch {
            log("sound: cannot start \(argv[0]): \(error)")
            return
        }
        lock.withLock { playerStatus = nil }
        let reaper = spawnThread { [self] in
            let status = waitForChild(pid)
            lock.withLock {
                playerStatus = status
                lock.broadcast()
            }
        }
        let (status, killed) = lock.withLock { () -> (Int32, Bool) in
            var killed = false
            while playerStatus == nil {
                if !killed && (stopRequested || monotonicMicros() >= soundDeadlineMicros) {
                    kill(-pid, SIGKILL)
                    killed = true
                }
                if killed {
                    lock.wait()
                } else {
                    _ = lock.wait(0, untilMonotonicMicros: soundDeadlineMicros)
                }
            }
            return (playerStatus!, killed)
        }
        pthread_join(reaper, nil)
        if !killed && status != 0 {
            log("sound: \(argv[0]) ended with status \(status) (its output: \(playerOutputPath))")
        }
    }

    /// BEL on the terminal the agent writes its log to, when that is a terminal (under systemd it is
    /// the journal, and nothing sounds).
    private func ringBell() {
        guard isatty(2) == 1 else { return }
        var bell: [UInt8] = [0x07]
        _ = write(2, &bell, 1)
    }

    private var playerOutputPath: String {
        stateDirectory.map { $0 + "/sound.log" } ?? "/dev/null"
    }

    /// Writes AlarmTone's file once (to a temporary name, then renamed into place).
    private func writeTone(to path: String) -> Bool {
        let bytes = AlarmTone.wav()
        var status = stat()
        if stat(path, &status) == 0 && Int(status.st_size) == bytes.count { return true }
        let temporary = path + ".partial"
        let descriptor = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else {
            log("sound: cannot write the alarm tone \(path): \(String(cString: strerror(errno)))")
            return false
        }
        let written = bytes.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
        close(descriptor)
        guard written == bytes.count, rename(temporary, path) == 0 else {
            log("sound: cannot write the alarm tone \(path): \(String(cString: strerror(errno)))")
            unlink(temporary)
            return false
        }
        return true
    }

    // MARK: Lost

    func showLost(commandID: String, message: String, phone: String) {
        let call = phone.isEmpty ? "" : "; call \(phone)"
        log("lost: THIS DEVICE IS LOST. Its owner says: \"\(message)\"\(call) (command \(commandID))")
        var notificationID: String?
        if let notifySend = desktopProgram("notify-send") {
            let body = phone.isEmpty ? message : "\(message)\nCall \(phone)"
            let outcome = try? runChild([
                notifySend, "--urgency=critical", "--app-name=findmy", "--icon=dialog-warning", "--print-id",
                "This device is lost", body,
            ])
            if let outcome, outcome.succeeded {
                notificationID = outcome.output.split(separator: "\n").first.map(String.init)
                log("lost: shown on the desktop (notification \(notificationID ?? "?"))")
            } else {
                log("lost: notify-send failed: \(outcome?.output ?? "could not run it")")
            }
        }
        let previous = lock.withLock {
            defer {
                lost = LostMessage(
                    commandID: commandID, message: message, phone: phone, notificationID: notificationID)
            }
            return lost
        }
        if let previous { closeNotification(previous) }
    }

    func clearLost() {
        let previous = lock.withLock {
            defer { lost = nil }
            return lost
        }
        guard let previous else { return }
        closeNotification(previous)
        log("lost: cleared, the device is found (it was lost by command \(previous.commandID))")
    }

    private func closeNotification(_ message: LostMessage) {
        guard let id = message.notificationID, let gdbus = desktopProgram("gdbus") else { return }
        _ = try? runChild([
            gdbus, "call", "--session", "--dest", "org.freedesktop.Notifications", "--object-path",
            "/org/freedesktop/Notifications", "--method", "org.freedesktop.Notifications.CloseNotification",
            id,
        ])
    }

    /// `name`'s path when a desktop session bus is there to talk to and the program is installed.
    private func desktopProgram(_ name: String) -> String? {
        let bus = variable("DBUS_SESSION_BUS_ADDRESS").map { !$0.isEmpty } ?? false
        let runtimeBus =
            variable("XDG_RUNTIME_DIR").map { AudioSystem.unixSocketAnswers($0 + "/bus") } ?? false
        guard bus || runtimeBus else { return nil }
        return AudioSystem.executable(name, environment: variable)
    }

    private func variable(_ name: String) -> String? {
        if let environment { return environment[name] }
        return getenv(name).map { String(cString: $0) }
    }

    private func temporaryDirectory() -> String {
        variable("TMPDIR").flatMap { $0.isEmpty ? nil : $0 } ?? "/tmp"
    }
}

extension AudioSystem {
    /// Nothing to play with: what the decision sees when a sound command makes it moot.
    static let none = AudioSystem(
        paplay: nil, alarmSound: nil, soundServerAnswers: false, aplay: nil, soundCardPresent: false)
}
