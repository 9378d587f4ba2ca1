#[zmesh_macros::service(channel = "pump")]
trait Pump {
    #[non_repeatable(conflate)]
    async fn dispense(&self) -> String;
}

fn main() {}
