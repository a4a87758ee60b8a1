"""Bank transfer (tool_use): pay an invoice via a banking API, covering a shortfall from savings."""

import json
import math
import re

from spade.envs import ToolError, ToolUseEnv

_CUSTOMERS = [
    "Mara Okafor", "Lukas Brandt", "Priya Nair", "Tomas Silva", "Yuki Tanaka", "Elena Rossi",
]  # fmt: skip
_PAYEES = [
    "Northwind Traders", "Blue Harbor Energy", "Cedar Street Dental", "Pinecrest Insurance",
    "Summit Internet", "Riverside Property",
]  # fmt: skip


def _money(cents: int) -> str:
    return f"{cents // 100}.{cents % 100:02d}"


def _cents(amount: object) -> int:
    if isinstance(amount, bool) or not isinstance(amount, (int, float, str)):
        raise ToolError("amount must be a number")
    try:
        value = float(str(amount).strip())
    except ValueError:
        raise ToolError("amount must be a number") from None
    if not math.isfinite(value) or not 0 < value <= 1e7:
        raise ToolError("amount must be a positive number")
    return round(value * 100)


class BankTransferEnv(ToolUseEnv):
    """Pay an invoice in full from a customer's checking account, which alone cannot cover it.

    Hidden state: balances, account and payee numbers, the invoice. A payment that overdraws
    checking fails with an error, so the agent must move the shortfall from savings first.
    Partial reward: thirds for one payment of the right amount to the right payee, the invoice id
    as its reference and the payment's confirmation id in the answer; halved if money went to a
    wrong payee or the invoice was paid twice.
    """

    skill = "error_recovery"
    hint = (
        "Gather the invoice, account and payee details before moving money, and read error "
        "messages: they say what to fix."
    )

    def setup(self) -> str:
        rng = self.rng
        self.customer = rng.choice(_CUSTOMERS)
        self.checking = f"CHK-{rng.randint(1000, 9999)}"
        self.savings = f"SAV-{rng.randint(1000, 9999)}"
        self.have = rng.randint(5000, 40000)
        self.invoice_cents = self.have + rng.randint(1000, 30000)
        spare = self.invoice_cents - self.have + rng.randint(5000, 50000)
        self.balances = {self.checking: self.have, self.savings: spare}
        self.payees = {
            name: f"PAY-{num}"
            for name, num in zip(_PAYEES, rng.sample(range(100000, 999999), 6), strict=True)
        }
        self.payee = rng.choice(_PAYEES)
        self.invoice = f"INV-{rng.randint(10000, 99999)}"
        self.tx_base = rng.randint(100000, 899999)
        self.transfers: list[dict] = []
        return (
            f"{self.customer} asks you to pay invoice {self.invoice} in full. External payments "
            "may only leave from a checking account; money can move freely between the "
            "customer's own accounts. Use the invoice id as the payment reference and finish "
            "with the payment's confirmation id, e.g. <answer>TX-123456</answer>. Tools: "
            "get_invoice, list_accounts, lookup_payee, transfer."
        )

    def tool_get_invoice(self, invoice_id: str) -> dict:
        """Get an invoice's payee name and amount due.

        Args:
            invoice_id: The invoice id, e.g. "INV-12345".
        """
        if str(invoice_id).strip().upper() != self.invoice:
            raise ToolError(f"no invoice {str(invoice_id)[:40]!r}")
        amount = _money(self.invoice_cents)
        return {"invoice_id": self.invoice, "payee": self.payee, "amount_due": amount}

    def tool_list_accounts(self, customer: str) -> list:
        """List a customer's accounts with their types and balances.

        Args:
            customer: The customer's full name.
        """
        if str(customer).strip().lower() != self.customer.lower():
            raise ToolError(f"no customer named {str(customer)[:40]!r}; give the full name")
        kinds = {self.checking: "checking", self.savings: "savings"}
        return [
            {"account_id": a, "type": kinds[a], "balance": self.balances[a] / 100}
            for a in sorted(kinds)
        ]

    def tool_lookup_payee(self, name: str) -> dict:
        """Find a registered payee's account id by name.

        Args:
            name: The payee's name as written on the invoice.
        """
        wanted = str(name).strip().lower()
        for payee in sorted(self.payees):
            if payee.lower() == wanted:
                return {"name": payee, "account_id": self.payees[payee]}
        close = [p for p in sorted(self.payees) if wanted and wanted.split()[0] in p.lower()]
        more = f"; did you mean {close}?" if close else ""
        raise ToolError(f"no payee named {str(name)[:40]!r}{more}")

    def tool_transfer(
        self, from_account: str, to_account: str, amount: float, reference: str = ""
    ) -> dict:
        """Move money from one of the customer's accounts to another account or a payee.

        Args:
            from_account: The account id to take money from.
            to_account: The account id or payee account id to send money to.
            amount: The amount in dollars, e.g. 120.50.
            reference: Free text shown to the receiver, e.g. an invoice id.
        """
        src, dst = str(from_account).strip().upper(), str(to_account).strip().upper()
        if src not in self.balances:
            raise ToolError(f"unknown source account {src[:40]!r}")
        if dst not in self.balances and dst not in self.payees.values():
            raise ToolError(f"unknown destination account {dst[:40]!r}")
        if dst == src:
            raise ToolError("source and destination are the same account")
        if dst not in self.balances and src != self.checking:
            raise ToolError("external payments may only leave from a checking account")
        cents = _cents(amount)
        if cents > self.balances[src]:
            raise ToolError(f"insufficient funds: {src} holds {_money(self.balances[src])}")
        self.balances[src] -= cents
        if dst in self.balances:
            self.balances[dst] += cents
        tx = f"TX-{self.tx_base + len(self.transfers) + 1}"
        note = str(reference)[:200]
        self.transfers.append({"id": tx, "to": dst, "cents": cents, "reference": note})
        return {"confirmation": tx, "from_balance": self.balances[src] / 100}

    def check_answer(self, answer: str) -> float:
        external = [t for t in self.transfers if t["to"] in self.payees.values()]
        paid = [t for t in external if t["to"] == self.payees[self.payee]]
        good = [t for t in paid if t["cents"] == self.invoice_cents]
        score = 0.0
        if good:
            pay = good[0]
            referenced = self.invoice.lower() in pay["reference"].lower()
            confirmed = re.search(r"\b" + pay["id"] + r"\b", answer) is not None
            score = (1 + referenced + confirmed) / 3
        return score * 0.5 if len(external) > 1 else score

    def solution(self) -> list[str]:
        def call(tool: str, **arguments) -> str:
            body = json.dumps({"name": tool, "arguments": arguments})
            return f"<tool_call>{body}</tool_call>"

        short = (self.invoice_cents - self.have) / 100
        pay = {"to_account": self.payees[self.payee], "amount": self.invoice_cents / 100}
        return [
            call("get_invoice", invoice_id=self.invoice),
            call("list_accounts", customer=self.customer),
            call("lookup_payee", name=self.payee),
            call("transfer", from_account=self.savings, to_account=self.checking, amount=short),
            call("transfer", from_account=self.checking, reference=self.invoice, **pay),
            f"<answer>TX-{self.tx_base + 2}</answer>",
        ]
