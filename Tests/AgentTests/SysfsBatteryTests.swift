import FindMyClient
import Foundation
import Testing

@testable import findmy_agent

/// `SysfsBattery` over a temporary tree laid out as /sys/class/power_supply.
@Suite struct SysfsBatteryTests {
    /// A fresh directory standing for /sys/class/power_supply, removed when the test ends.
    final class Tree {
        let root = NSTemporaryDirectory() + "findmy-power-\(UUID().uuidString.prefix(8))"

        init() throws {
            try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        }
        deinit { try? FileManager.default.removeItem(atPath: root) }

        /// One supply: its attribute files, each holding its value and a newline as the kernel writes.
        func supply(_ name: String, _ attributes: [String: String]) throws {
            let directory = root + "/" + name
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            for (attribute, value) in attributes {
                try (value + "\n").write(
                    toFile: directory + "/" + attribute, atomically: true, encoding: .utf8)
            }
        }

        var battery: SysfsBattery { SysfsBattery(root: root) }
    }

    @Test func noBatteryIsNil() throws {
        let tree = try Tree()
        #expect(tree.battery.current() == nil)
        try tree.supply("AC", ["type": "Mains", "online": "1"])
        #expect(tree.battery.current() == nil)
        #expect(SysfsBattery(root: tree.root + "/absent").current() == nil)
    }

    @Test func oneBatteryItsCapacityAndStatus() throws {
        let tree = try Tree()
        try tree.supply("BAT0", ["type": "Battery", "capacity": "80", "status": "Discharging"])
        #expect(tree.battery.current() == BatteryState(percent: 80, isCharging: false))
        try tree.supply("BAT0", ["status": "Charging"])
        #expect(tree.battery.current() == BatteryState(percent: 80, isCharging: true))
        // Full: on external power, and so not running down.
        try tree.supply("BAT0", ["capacity": "100", "status": "Full"])
        #expect(tree.battery.current() == BatteryState(percent: 100, isCharging: true))
    }

    @Test func notChargingOnMainsPowerCountsAsCharging() throws {
        let tree = try Tree()
        // A laptop holding its battery at a charge threshold: plugged in, "Not charging".
        try tree.supply("BAT0", ["type": "Battery", "capacity": "60", "status": "Not charging"])
        try tree.supply("AC", ["type": "Mains", "online": "0"])
        #expect(tree.battery.current() == BatteryState(percent: 60, isCharging: false))
        try tree.supply("AC", ["online": "1"])
        #expect(tree.battery.current() == BatteryState(percent: 60, isCharging: true))
    }

    @Test func severalBatteriesAreAveragedByEnergy() throws {
        let tree = try Tree()
        // 40 of 50 Wh and 5 of 20 Wh: 45 of 70 Wh, 64.3 %, not the 52.5 % of the two percentages.
        try tree.supply(
            "BAT0",
            [
                "type": "Battery", "capacity": "80", "status": "Discharging", "energy_now": "40000000",
                "energy_full": "50000000",
            ])
        try tree.supply(
            "BAT1",
            [
                "type": "Battery", "capacity": "25", "status": "Charging", "energy_now": "5000000",
                "energy_full": "20000000",
            ])
        let state = try #require(tree.battery.current())
        #expect(abs(state.percent - 45.0 / 70.0 * 100) < 1e-9)
        #expect(state.isCharging)
    }

    @Test func chargeCountersWhenThereIsNoEnergy() throws {
        let tree = try Tree()
        try tree.supply(
            "BAT0",
            ["type": "Battery", "status": "Discharging", "charge_now": "3000000", "charge_full": "4000000"])
        try tree.supply(
            "BAT1",
            ["type": "Battery", "status": "Discharging", "charge_now": "1000000", "charge_full": "4000000"])
        #expect(tree.battery.current() == BatteryState(percent: 50, isCharging: false))
    }

    @Test func withoutCountersThePercentagesAreAveraged() throws {
        let tree = try Tree()
        try tree.supply("BAT0", ["type": "Battery", "capacity": "90", "status": "Discharging"])
        try tree.supply("BAT1", ["type": "Battery", "capacity": "30", "status": "Unknown"])
        #expect(tree.battery.current() == BatteryState(percent: 60, isCharging: false))
    }

    @Test func aMouseBatteryIsNotTheDevices() throws {
        let tree = try Tree()
        try tree.supply(
            "hidpp_battery_0",
            ["type": "Battery", "scope": "Device", "capacity": "5", "status": "Discharging"])
        #expect(tree.battery.current() == nil)
        try tree.supply("BAT0", ["type": "Battery", "capacity": "70", "status": "Discharging"])
        #expect(tree.battery.current() == BatteryState(percent: 70, isCharging: false))
    }

    @Test func aBatteryThatSaysNothingUsableIsSkipped() throws {
        let tree = try Tree()
        try tree.supply("BAT0", ["type": "Battery", "status": "Unknown", "capacity": "garbage"])
        #expect(tree.battery.current() == nil)
        try tree.supply("BAT1", ["type": "Battery", "capacity": "101", "status": "Full"])
        // A driver's 101 % is clamped: the server refuses a battery above 100.
        #expect(tree.battery.current() == BatteryState(percent: 100, isCharging: true))
    }
}
