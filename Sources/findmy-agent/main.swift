// findmy-agent: a Linux device's side of findmy, built on FindMyClient (docs/agent.md). The work is
// in Agent.swift: closures written here would be main-actor isolated.
import FindMyClient

#if canImport(Glibc)
    import Glibc
#endif

let arguments = Array(CommandLine.arguments.dropFirst())
// TLS writes with write(2): a server that hung up must not end the agent with SIGPIPE.
signal(SIGPIPE, SIG_IGN)
// run takes its signals with sigwait: they must be blocked on this, the main thread, before any
// other thread exists, or the main thread takes SIGUSR1's default action, which ends the process.
// So no await here: top-level code with one runs on the concurrency runtime's threads, not this.
let signals: sigset_t? = arguments.first == "run" ? Agent.blockSignals() : nil
/// The process's environment, from the C library's `environ`.
func environmentVariables() -> [String: String] {
    var variables: [String: String] = [:]
    var entry = environ
    while let pointer = entry.pointee {
        let text = String(cString: pointer)
        if let equals = text.firstIndex(of: "=") {
            variables[String(text[..<equals])] = String(text[text.index(after: equals)...])
        }
        entry += 1
    }
    return variables
}
exit(Agent.mainBlocking(arguments, environment: environmentVariables(), signals: signals))
