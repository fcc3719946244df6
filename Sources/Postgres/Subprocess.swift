import Foundation
import Threads

#if canImport(Glibc)
    import Glibc
#endif

/// What a finished command printed (standard output and error together) and how it ended.
struct CommandOutcome {
    var status: Int32
    var output: String
    var succeeded: Bool { status == 0 }
}

/// Runs `executable` to completion with `posix_spawn` and `waitpid`, as `user` when given (through
/// `runuser -u USER --`, which needs root).
///
/// Not Foundation's `Process`: on Linux it learns that a child ended from a descriptor the child
/// inherits, and `pg_ctl start` leaves a server running that keeps it open, so `waitUntilExit` never
/// returns. For the same reason output goes to a temporary file rather than a pipe, and every
/// descriptor above 2 is closed in the child.
func runCommand(
    _ executable: String, _ arguments: [String], as user: String? = nil, in directory: String? = nil
)
    throws(EmbeddedPostgresError) -> CommandOutcome
{
    let argv = user.map { [runuserPath, "-u", $0, "--", executable] + arguments } ?? [executable] + arguments
    let outputPath =
        NSTemporaryDirectory() + "findmy-command-\(getpid())-\(UInt64.random(in: 0...UInt64.max))"
    defer { unlink(outputPath) }
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
    posix_spawn_file_actions_addopen(&actions, 1, outputPath, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
    posix_spawn_file_actions_adddup2(&actions, 1, 2)
    closeInheritedDescriptors(&actions, changingTo: directory)
    let cArguments = argv.map { strdup($0) } + [nil]
    defer { for argument in cArguments { free(argument) } }
    var pid: pid_t = 0
    let spawned = posix_spawn(&pid, argv[0], &actions, nil, cArguments, environ)
    guard spawned == 0 else {
        throw EmbeddedPostgresError("cannot run \(argv[0]): \(String(cString: strerror(spawned)))")
    }
    var status: Int32 = 0
    while waitpid(pid, &status, 0) == -1 {
        guard errno == EINTR else {
            throw EmbeddedPostgresError("waitpid for \(argv[0]) failed: \(String(cString: strerror(errno)))")
        }
    }
    let output = (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? ""
    // WIFEXITED / WEXITSTATUS are macros Swift cannot call: a normal exit has the low 7 bits clear.
    let exitStatus = status & 0x7f == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
    return CommandOutcome(status: exitStatus, output: trimmed(output))
}

private var runuserPath: String {
    ["/usr/sbin/runuser", "/sbin/runuser"].first { FileManager.default.isExecutableFile(atPath: $0) }
        ?? "runuser"
}

/// Starts the embedded server as a child that never outlives findmy: Threads' `spawnChild`, which
/// spawns from one thread that lives as long as the process (the parent-death signal follows the
/// creating thread).
func spawnChild(_ argv: [String], outputPath: String, in directory: String?) throws(EmbeddedPostgresError)
    -> pid_t
{
    do {
        return try Threads.spawnChild(argv, outputPath: outputPath, in: directory)
    } catch {
        throw EmbeddedPostgresError(error.description)
    }
}
