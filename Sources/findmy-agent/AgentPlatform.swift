// The Linux parts the run command is built from, chosen by its options: where fixes come from, the
// battery, and what sound and lost do.
import FindMyClient

struct AgentPlatform {
    var fixSource: any FixSource
    var battery: (any BatterySource)?
    var actions: any DeviceActions

    static func make(_ options: RunOptions, log: @escaping @Sendable (String) -> Void) throws -> AgentPlatform
    {
        let fixSource: any FixSource
        switch options.source {
        case .gpsd(let host, let port):
            fixSource = GPSDFixSource(host: host, port: port, log: log)
        case .fixed(let latitude, let longitude, let accuracyMeters):
            fixSource = FixedFixSource(
                latitude: latitude, longitude: longitude, accuracyMeters: accuracyMeters,
                intervalSeconds: options.intervalSeconds)
        }
        return AgentPlatform(
            fixSource: fixSource, battery: SysfsBattery(),
            actions: LinuxDeviceActions(
                soundCommand: options.soundCommand, stateDirectory: options.stateDirectory, log: log))
    }
}
