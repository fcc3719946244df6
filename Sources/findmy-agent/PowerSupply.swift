// The battery from the kernel's power-supply class (Documentation/ABI/testing/sysfs-class-power):
// one directory per supply under /sys/class/power_supply, one value per file.
import FindMyClient

#if canImport(Glibc)
    import Glibc
#endif

/// A `BatterySource` over `/sys/class/power_supply` (or a tree laid out the same, for tests).
///
/// The device's batteries are the supplies of `type` Battery, except those of `scope` Device (a
/// wireless mouse's or a keyboard's, which the kernel lists too). With several (a laptop with two),
/// the percentage is the energy left over the energy they hold when full: `energy_now` over
/// `energy_full` (µWh), else `charge_now` over `charge_full` (µAh), summed over the batteries;
/// when one of them has neither, the plain mean of their `capacity` (%). Charging means on
/// external power: a battery `Charging` or `Full`, or a `Mains` or `USB` supply `online` while no
/// battery says `Discharging` (a laptop holding its charge at a threshold says "Not charging").
/// No battery, or none that says a level: nil.
struct SysfsBattery: BatterySource {
    let root: String

    init(root: String = "/sys/class/power_supply") {
        self.root = root
    }

    /// What one battery directory says.
    struct Battery: Equatable {
        var percent: Double?
        var now: Double?
        var full: Double?
        var status: String
    }

    func current() -> BatteryState? {
        var batteries: [Battery] = []
        var externalPowerOnline = false
        for name in Self.entries(of: root) {
            let directory = root + "/" + name
            switch Self.read(directory + "/type") {
            case "Battery":
                guard Self.read(directory + "/scope") != "Device" else { continue }
                let battery = Self.battery(at: directory)
                if battery.percent != nil || (battery.now != nil && battery.full != nil) {
                    batteries.append(battery)
                }
            case "Mains", "USB":
                if Self.read(directory + "/online") == "1" { externalPowerOnline = true }
            default:
                continue
            }
        }
        return Self.combine(batteries, externalPowerOnline: externalPowerOnline)
    }

    static func combine(_ batteries: [Battery], externalPowerOnline: Bool) -> BatteryState? {
        guard !batteries.isEmpty else { return nil }
        var percent: Double
        let full = batteries.compactMap(\.full).reduce(0, +)
        if batteries.allSatisfy({ $0.now != nil && $0.full != nil }), full > 0 {
            percent = batteries.compactMap(\.now).reduce(0, +) / full * 100
        } else {
            let known = batteries.compactMap { $0.percent ?? $0.fraction.map { $0 * 100 } }
            guard !known.isEmpty else { return nil }
            percent = known.reduce(0, +) / Double(known.count)
        }
        percent = min(100, max(0, percent))
        let statuses = batteries.map(\.status)
        let charging =
            statuses.contains("Charging") || statuses.contains("Full")
            || (externalPowerOnline && !statuses.contains("Discharging"))
        return BatteryState(percent: percent, isCharging: charging)
    }

    static func battery(at directory: String) -> Battery {
        let now = number(directory + "/energy_now") ?? number(directory + "/charge_now")
        let full =
            number(directory + "/energy_now") != nil
            ? number(directory + "/energy_full") : number(directory + "/charge_full")
        return Battery(
            percent: number(directory + "/capacity"), now: now, full: full.flatMap { $0 > 0 ? $0 : nil },
            status: read(directory + "/status") ?? "Unknown")
    }

    /// The names in `directory` (supplies are symbolic links to their devices), without `.` and `..`.
    static func entries(of directory: String) -> [String] {
        guard let handle = opendir(directory) else { return [] }
        defer { closedir(handle) }
        var names: [String] = []
        while let entry = readdir(handle) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names.sorted()
    }

    static func number(_ path: String) -> Double? {
        read(path).flatMap(Double.init).flatMap { $0.isFinite && $0 >= 0 ? $0 : nil }
    }

    /// A sysfs attribute: its text without the newline; nil when absent or unreadable (some
    /// attributes fail with ENODEV while a battery is being removed).
    static func read(_ path: String) -> String? {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        var buffer = [UInt8](repeating: 0, count: 256)
        var count: Int
        repeat { count = Glibc.read(descriptor, &buffer, buffer.count) } while count < 0 && errno == EINTR
        guard count >= 0 else { return nil }
        var text = String(decoding: buffer[..<count], as: UTF8.self)
        while text.last == "\n" || text.last == " " { text.removeLast() }
        return text
    }
}

extension SysfsBattery.Battery {
    /// now / full, when both are known.
    var fraction: Double? {
        guard let now, let full, full > 0 else { return nil }
        return now / full
    }
}
