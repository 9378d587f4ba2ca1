#[zmesh_macros::service(channel = "pump")]
trait Pump {
    #[non_repeatable]
    async fn dispense(&self, recipe: &str) -> String;
}

fn main() {}
