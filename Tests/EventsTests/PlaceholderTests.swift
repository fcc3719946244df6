import Events
import Testing

// Placeholder so `swift test` has the target the skeleton names; real log tests replace it.
@Test func formatVersionIsNotYetAssigned() {
    #expect(EventLogFormat.version == 0)
}
