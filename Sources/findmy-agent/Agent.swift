// The agent's commands once parsed: enrol, run, stop-sound, status.
import FindMyClient
import FindMyClientHTTP
import Threads

#if canImport(Glibc)
    import Glibc
#endif

enum Agent {
    /// Runs the command line; returns the exit status (0 done, 1 failed, 2 a usage error).
    /// `main` on the concurrency runtime's threads while the calling thread waits for its status.
    static func mainBlocking(_ arguments: [String], environment: [String: String], signals: sigset_t?)
        -> Int32
    {
        final class Outcome: @unchecked Sendable {
            let lock = ConditionLock()
            var status: Int32?
        }
        let outcome = Outcome()
        Task {
            let status = await main(arguments, environment: environment, signals: signals)
            outcome.lock.withLock { outcome.status = status }
            outcome.lock.broadcast()
        }
        return outcome.lock.withLock {
            while outcome.status == nil { outcome.lock.wait() }
            return outcome.status!
        }
    }

    /// `signals`: those `blockSignals` blocked, for run.
    static func main(_ arguments: [String], environment: [String: String], signals: sigset_t?) async -> Int32
    {
        let command: AgentCommand
        do {
            command = try AgentCommand.parse(arguments, environment: environment)
        } catch {
            log("\(error)")
            return 2
        }
        do {
            switch command {
            case .help(let text):
                print(text)
            case .enrol(let options):
                try await enrol(options)
            case .run(let options):
                try await run(options, signals: signals ?? blockSignals())
            case .stopSound(let directory):
                try stopSound(directory)
            case .status(let directory):
                try status(directory)
            }
            return 0
        } catch {
            log("\(error)")
            return 1
        }
    }

    static func client(
        _ directory: String, actions: (any DeviceActions)?, battery: (any BatterySource)?,
        options: RunOptions? = nil
    ) throws -> FindMyClient {
        try makeStateDirectory(directory)
        var configuration = ClientConfiguration(stateDirectory: directory, platform: "linux", log: log)
        if let options {
            configuration.batchFixesMax = options.batchFixes
            configuration.batchAgeSeconds = options.batchAgeSeconds
            configuration.soundLimitSeconds = options.soundSeconds
        }
        return try FindMyClient(
            configuration: configuration, transport: SocketClientTransport(),
            credentials: FileCredentialStore(stateDirectory: directory), actions: actions, battery: battery)
    }

    static func enrol(_ options: EnrolOptions) async throws {
        var configuration = ClientConfiguration(
            stateDirectory: options.stateDirectory, platform: "linux", log: log)
        configuration.model = options.model
        try makeStateDirectory(options.stateDirectory)
        let client = try FindMyClient(
            configuration: configuration, transport: SocketClientTransport(),
            credentials: FileCredentialStore(stateDirectory: options.stateDirectory), actions: nil)
        let credentials: DeviceCredentials
        if let link = options.setupLink {
            credentials = try await client.enrol(setupLink: link, name: options.name)
        } else {
            credentials = try await client.enrol(
                serverURL: options.server!, userToken: options.userToken!, name: options.name)
        }
        print("enrolled: device \(credentials.deviceID.map(String.init) ?? "?") at \(credentials.serverURL)")
    }

    static func run(_ options: RunOptions, signals: sigset_t) async throws {
        let lock = try AgentLock(stateDirectory: options.stateDirectory)
        defer { lock.release() }
        let parts = try AgentPlatform.make(options, log: log)
        let client = try client(
            options.stateDirectory, actions: parts.actions, battery: parts.battery, options: options)
        guard client.currentCredentials?.deviceToken != nil else {
            throw AgentError("not enrolled: run findmy-agent enrol first (with the same --state-dir)")
        }
        let task = Task { try await client.run(fixSource: parts.fixSource) }
        takeSignals(signals, client: client, task: task)
        log(
            "running as device \(client.currentCredentials?.deviceID.map(String.init) ?? "?"), state in \(options.stateDirectory)"
        )
        do {
            try await task.value
        } catch is CancellationError {}
        log("stopped; \(client.queue.counts.openFixes) fixes in the open batch stay queued")
    }

    static func stopSound(_ directory: String) throws {
        guard let pid = AgentLock.runningAgent(stateDirectory: directory) else {
            throw AgentError("no findmy-agent runs with the state directory \(directory)")
        }
        guard kill(pid, SIGUSR1) == 0 else {
            throw AgentError("cannot signal findmy-agent (pid \(pid)): \(String(cString: strerror(errno)))")
        }
        print("asked findmy-agent (pid \(pid)) to stop the sound")
    }

    static func status(_ directory: String) throws {
        print("state directory: \(directory)")
        if let credentials = try FileCredentialStore(stateDirectory: directory).load() {
            print("server: \(credentials.serverURL)")
            print("device uuid: \(credentials.deviceUUID)")
            if let id = credentials.deviceID, credentials.deviceToken != nil {
                print("enrolled: device \(id), name \(credentials.name)")
            } else {
                print("enrolled: no (run findmy-agent enrol)")
            }
        } else {
            print("enrolled: no (run findmy-agent enrol)")
        }
        let paused = FindMyClient.isPaused(stateDirectory: directory)
        print("reporting: \(paused ? "paused" : "on")")
        let queue = try FixQueue.inspect(directory: directory + "/queue")
        print(
            "queued: \(queue.fixes) fixes, \(queue.batches) batches ready to send, \(queue.refused) refused batches kept"
        )
        if let pid = AgentLock.runningAgent(stateDirectory: directory) {
            print("agent: running (pid \(pid))")
        } else {
            print("agent: not running")
        }
    }

    static func makeStateDirectory(_ directory: String) throws {
        var made = ""
        for part in directory.split(separator: "/") {
            made += (made.isEmpty && !directory.hasPrefix("/") ? "" : "/") + part
            guard mkdir(made, 0o700) == 0 || errno == EEXIST else {
                throw AgentError(
                    "cannot create the state directory \(directory): \(made): \(String(cString: strerror(errno)))"
                )
            }
        }
    }

    /// Blocks the signals the agent takes with sigwait, in this thread and every one started after.
    static func blockSignals() -> sigset_t {
        var signals = sigset_t()
        sigemptyset(&signals)
        for signal in [SIGTERM, SIGINT, SIGUSR1] { sigaddset(&signals, signal) }
        pthread_sigmask(SIG_BLOCK, &signals, nil)
        signal(SIGPIPE, SIG_IGN)
        return signals
    }

    /// SIGUSR1 stops the sound; SIGTERM or SIGINT ends the run.
    static func takeSignals(_ signals: sigset_t, client: FindMyClient, task: Task<Void, any Error>) {
        pthread_detach(
            spawnThread {
                while true {
                    var received: Int32 = 0
                    var waitFor = signals
                    sigwait(&waitFor, &received)
                    if received == SIGUSR1 {
                        client.stopSound()
                        continue
                    }
                    log("stopping (\(received == SIGTERM ? "SIGTERM" : "SIGINT"))")
                    task.cancel()
                    return
                }
            })
    }
}

/// One line per event on standard error.
@Sendable func log(_ line: String) {
    var bytes = Array(("findmy-agent: " + line + "\n").utf8)
    _ = write(2, &bytes, bytes.count)
}
