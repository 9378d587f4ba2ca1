//! A typed service (MISSION A1, A2): the pump trait served by node `plant`, called from node
//! `operator` through the generated `PumpClient` (ClientServer over ipc, both nodes in this
//! process), then both nodes shut down. Run with `cargo run --example pump`.

use zmesh::prelude::*;

#[service(channel = "pump", version = 1)]
trait Pump {
    #[query]
    async fn pressure(&self) -> f64;
    #[idempotent(conflate)]
    async fn set_setpoint(&self, bar: f64) -> f64;
    #[non_repeatable]
    async fn dispense(&self, litres: u32) -> String;
}

struct Plant;

impl Pump for Plant {
    async fn pressure(&self) -> f64 {
        1.2
    }
    async fn set_setpoint(&self, bar: f64) -> f64 {
        bar
    }
    async fn dispense(&self, litres: u32) -> String {
        format!("{litres} l dispensed")
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let ep = format!("ipc:///tmp/zmesh-pump-{}", std::process::id());
    let plant = Node::builder(NodeConfig::new("plant").server(&ep));
    let plant = plant.expose(Plant.into_service()).start().await?;
    let operator =
        NodeConfig::new("operator").dial_server(ServerConfig::new(PumpClient::CHANNEL, &ep));
    let operator = Node::start(operator).await?;
    let pump = PumpClient::new(&operator);
    pump.ready().await?; // connecting is the wait: no timeout, no event loop
    let bar = pump.pressure().await?;
    let set = pump.set_setpoint(bar + 0.5).await?;
    let receipt = pump.dispense(5).idempotency_key("order-1182").await?;
    println!("pressure {bar} bar, setpoint {set} bar, {receipt}");
    operator.shutdown().await?;
    plant.shutdown().await?;
    Ok(())
}
