#[zmesh_macros::service(channel = "pump")]
trait Pump {
    #[query(fast)]
    async fn pressure(&self) -> f64;
    #[non_repeatable = "once"]
    async fn dispense(&self, litres: u32) -> String;
}

fn main() {}
