#if canImport(Glibc)
    import Glibc
#endif

/// Why a child could not be started: the `posix_spawn` error, as text.
public struct SpawnError: Error, Sendable, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// Starts `argv` (`argv[0]` a path) as a child (the embedded PostgreSQL, a test's mosquitto, or a
/// command `runChild` waits for), with standard input from /dev/null and standard output and error appended to
/// `outputPath`, in `directory` when given, in a process group of its own (a Ctrl-C meant for the
/// parent does not reach it: the parent stops it in order), with no signal blocked or ignored.
///
/// A child that must not outlive this process is started under `setpriv --pdeathsig SIGNAL --`
/// (`setprivPath`). The kernel sends a parent-death signal when the *thread* that created the
/// child ends, not the process (prctl(2), PR_SET_PDEATHSIG), so every child is spawned from one
/// thread that lives as long as the process (`ChildSpawner`): spawned from a worker thread that
/// ends later, it would be killed with that thread.
public func spawnChild(_ argv: [String], outputPath: String, in directory: String? = nil) throws(SpawnError)
    -> pid_t
{
    precondition(!argv.isEmpty, "spawnChild needs a program")
    let outcome = ChildSpawner.shared.run { () -> Result<pid_t, SpawnError> in
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, outputPath, O_WRONLY | O_CREAT | O_APPEND, 0o600)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        closeInheritedDescriptors(&actions, changingTo: directory)
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var none = sigset_t()
        sigemptyset(&none)
        posix_spawnattr_setsigmask(&attributes, &none)
        // findmy serve blocks SIGINT and SIGTERM (it takes them with sigwait) and ignores SIGPIPE;
        // a child inherits both, and an ignored signal stays ignored across exec.
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for signal in [SIGINT, SIGTERM, SIGQUIT, SIGPIPE, SIGHUP, SIGUSR1, SIGUSR2] {
            sigaddset(&defaults, signal)
        }
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setpgroup(&attributes, 0)
        posix_spawnattr_setflags(
            &attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP))
        let cArguments = argv.map { strdup($0) } + [nil]
        defer { for argument in cArguments { free(argument) } }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, argv[0], &actions, &attributes, cArguments, environ)
        guard spawned == 0 else {
            return .failure(SpawnError("cannot run \(argv[0]): \(String(cString: strerror(spawned)))"))
        }
        return .success(pid)
    }
    return try outcome.get()
}

/// Where `setpriv` (util-linux) is: it sets a child's parent-death signal just before it executes
/// the program, after any change of credentials (which would clear it).
public var setprivPath: String {
    ["/usr/bin/setpriv", "/bin/setpriv"].first { access($0, X_OK) == 0 } ?? "setpriv"
}

/// What a command run to its end printed (standard output and error together) and how it ended.
public struct ChildOutcome: Sendable {
    /// The exit status; 128 + the signal's number when a signal ended it, as a shell says.
    public var status: Int32
    public var output: String
    public var succeeded: Bool { status == 0 }

    public init(status: Int32, output: String) {
        self.status = status
        self.output = output
    }
}

/// Runs `argv` to its end as `spawnChild` starts it, and returns its output and exit status.
///
/// Not Foundation's `Process`: on Linux it learns that a child ended from a descriptor the child
/// inherits, and `pg_ctl start` leaves a server running that keeps it open, so `waitUntilExit` never
/// returns. For the same reason the output goes to a temporary file rather than a pipe (and every
/// descriptor above 2 is closed in the child).
public func runChild(_ argv: [String], in directory: String? = nil) throws(SpawnError) -> ChildOutcome {
    let temporary = getenv("TMPDIR").map { String(cString: $0) }.flatMap { $0.isEmpty ? nil : $0 } ?? "/tmp"
    let outputPath = temporary + "/findmy-command-\(getpid())-\(UInt64.random(in: 0...UInt64.max))"
    defer { unlink(outputPath) }
    let pid = try spawnChild(argv, outputPath: outputPath, in: directory)
    let status = waitForChild(pid)
    return ChildOutcome(status: status, output: readWholeFile(outputPath))
}

/// Waits for our child `pid` to end, reaps it and returns its exit status (as `childExitStatus`).
public func waitForChild(_ pid: pid_t) -> Int32 {
    var status: Int32 = 0
    while waitpid(pid, &status, 0) == -1 {
        if errno != EINTR { return -1 }
    }
    return exitStatus(status)
}

/// A status from waitpid as a shell says it. WIFEXITED / WEXITSTATUS / WTERMSIG are macros Swift
/// cannot call: a normal exit has the low 7 bits clear.
private func exitStatus(_ status: Int32) -> Int32 {
    let signal = status & 0x7f
    return signal == 0 ? (status >> 8) & 0xff : 128 + signal
}

/// The bytes of the file at `path` as UTF-8 text; empty when it cannot be read.
private func readWholeFile(_ path: String) -> String {
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { return "" }
    defer { close(fd) }
    var bytes: [UInt8] = []
    var piece = [UInt8](repeating: 0, count: 64 << 10)
    while true {
        let count = read(fd, &piece, piece.count)
        if count < 0 && errno == EINTR { continue }
        guard count > 0 else { break }
        bytes += piece[..<count]
    }
    return String(decoding: bytes, as: UTF8.self)
}

/// Whether our child `pid` has ended; reaps it if so (a child that ended stays a zombie until then).
public func childEnded(_ pid: pid_t) -> Bool { childExitStatus(pid) != nil }

/// Nil while our child `pid` runs; once it has ended, reaps it and returns its exit status (128 +
/// the signal's number when a signal ended it, as a shell says; -1 when it was reaped already).
public func childExitStatus(_ pid: pid_t) -> Int32? {
    var status: Int32 = 0
    let result = waitpid(pid, &status, WNOHANG)
    if result == -1 && errno == ECHILD { return -1 }
    guard result == pid else { return nil }
    return exitStatus(status)
}

/// Waits for our child `pid` to end and reaps it.
public func reapChild(_ pid: pid_t) { _ = waitForChild(pid) }

// glibc declares these GNU extensions only under _GNU_SOURCE, which Swift's Glibc module does not
// set; they exist since glibc 2.34 and 2.29, so look them up at run time and go without when absent.
private typealias CloseFrom =
    @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32
private typealias ChangeDirectory =
    @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, UnsafePointer<CChar>) -> Int32
private let spawnCloseFrom = dlsym(nil, "posix_spawn_file_actions_addclosefrom_np").map {
    unsafeBitCast($0, to: CloseFrom.self)
}
private let spawnChangeDirectory = dlsym(nil, "posix_spawn_file_actions_addchdir_np").map {
    unsafeBitCast($0, to: ChangeDirectory.self)
}

/// Adds to `actions`: close every descriptor above 2 in the child, and change to `directory` when
/// given, where glibc offers those actions.
private func closeInheritedDescriptors(
    _ actions: inout posix_spawn_file_actions_t, changingTo directory: String?
) {
    if let closeFrom = spawnCloseFrom { _ = closeFrom(&actions, 3) }
    if let directory, let changeDirectory = spawnChangeDirectory { _ = changeDirectory(&actions, directory) }
}

/// A result handed from the spawner's thread to its caller, under the spawner's lock.
private final class SpawnResult<T>: @unchecked Sendable { var value: T? }

/// One thread that lives as long as the process and only starts children: see `spawnChild`.
private final class ChildSpawner: @unchecked Sendable {
    static let shared = ChildSpawner()
    private let lock = ConditionLock()
    private var jobs: [@Sendable () -> Void] = []

    private init() {
        let thread = spawnThread { [self] in
            while true {
                let job = lock.withLock {
                    while jobs.isEmpty { lock.wait() }
                    return jobs.removeFirst()
                }
                job()
            }
        }
        pthread_detach(thread)
    }

    func run<T: Sendable>(_ body: @escaping @Sendable () -> T) -> T {
        let box = SpawnResult<T>()
        lock.withLock {
            jobs.append { [lock] in
                let value = body()
                lock.withLock { box.value = value }
                lock.broadcast()
            }
        }
        lock.broadcast()
        return lock.withLock {
            while box.value == nil { lock.wait() }
            return box.value!
        }
    }
}
