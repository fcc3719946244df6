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

exit(
    await Agent.main(
        Array(CommandLine.arguments.dropFirst()), environment: ProcessInfo.processInfo.environment))
