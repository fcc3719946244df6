// The Linux parts the run command is built from, chosen by its options: where fixes come from, the
// battery, and what sound and lost do.
import FindMyClient

struct AgentPlatform {
    var fixSource: any FixSource
    var battery: (any BatterySource)?
    var actions: any DeviceActions

    static func make(_ options: RunOptions, log: @escaping @Sendable (String) -> Void) throws -> AgentPlatform
    {
        // The gpsd, fixed-position, battery and sound/lost parts come with the Linux platform files
        // (GPSD.swift, FixedPosition.swift, PowerSupply.swift, LinuxActions.swift).
        throw AgentError("this build of findmy-agent has no Linux platform parts yet: \(options.source)")
    }
}
