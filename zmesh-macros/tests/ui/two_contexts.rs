struct Context;

#[zmesh_macros::service(channel = "pump")]
trait Pump {
    #[non_repeatable]
    async fn dispense(&self, first: Context, litres: u32, second: Context) -> String;
}

fn main() {}
