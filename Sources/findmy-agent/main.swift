// findmy-agent: a Linux device's side of findmy, built on FindMyClient (docs/agent.md). The work is
// in Agent.swift: closures written here would be main-actor isolated.
import FindMyClient

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif
#if canImport(Glibc)
    import Glibc
#endif

let arguments = Array(CommandLine.arguments.dropFirst())
// run takes its signals with sigwait: they must be blocked on this, the main thread, before any
// other thread exists, or the main thread takes SIGUSR1's default action, which ends the process.
// So no await here: top-level code with one runs on the concurrency runtime's threads, not this.
let signals: sigset_t? = arguments.first == "run" ? Agent.blockSignals() : nil
exit(Agent.mainBlocking(arguments, environment: ProcessInfo.processInfo.environment, signals: signals))
