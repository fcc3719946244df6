import Threads

#if canImport(Glibc)
    import Glibc
#endif

/// Blocks SIGTERM and SIGINT in this thread (and every thread started after), so that they can
/// be taken with sigwait instead of a C handler that would have to touch Swift state.
func blockShutdownSignals() -> sigset_t {
    var signals = sigset_t()
    sigemptyset(&signals)
    sigaddset(&signals, SIGTERM)
    sigaddset(&signals, SIGINT)
    pthread_sigmask(SIG_BLOCK, &signals, nil)
    signal(SIGPIPE, SIG_IGN)
    return signals
}

/// Takes the first of `signals` (blocked by `blockShutdownSignals`) with sigwait on a thread of its
/// own and asks `group` to stop, naming the signal. The thread lives as long as the process.
func requestStopOnSignal(_ group: ServiceGroup, _ signals: sigset_t) {
    let waiter = spawnThread {
        var received: Int32 = 0
        var waitFor = signals
        sigwait(&waitFor, &received)
        group.requestStop(received == SIGTERM ? "SIGTERM" : "SIGINT")
    }
    pthread_detach(waiter)
}

/// Starts the services of `group` in order; a service that cannot start throws its own error
/// (the group has stopped those started before it), as the commands report it.
func startGroup(_ group: ServiceGroup, _ services: [any Service]) throws {
    do throws(ServiceStartError) {
        for service in services { try group.start(service) }
    } catch {
        throw error.underlying
    }
}
