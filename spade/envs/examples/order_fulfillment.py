"""Order fulfillment (tool_use): restock short products, ship an order and report its total."""

import json
import re
from typing import Any

from spade.envs import ToolError, ToolUseEnv

_NAMES = [
    "blue mug", "red mug", "green mug", "steel bottle", "glass bottle", "canvas bag",
    "leather bag", "paper notebook", "desk lamp", "phone stand", "usb cable", "wall clock",
]  # fmt: skip
_REFILL = 50


class OrderFulfillmentEnv(ToolUseEnv):
    """Ship a pending order after topping up every product that lacks stock for it.

    Hidden state: the products' prices and stock and the orders' contents (seen only through the
    tools). Partial reward: the share of checks passed (order shipped, each ordered product's final
    stock, the reported total), halved if other products or orders were changed.
    """

    skill = "state_modification"
    hint = (
        "Read the order first, compare each product's stock with the ordered quantity, and "
        "fix shortages before shipping."
    )

    def setup(self) -> str:
        rng = self.rng
        self.products: dict[str, dict[str, Any]] = {}
        for name, num in zip(rng.sample(_NAMES, 8), rng.sample(range(100, 1000), 8), strict=True):
            cents = rng.randint(3, 60) * 100 + rng.choice([0, 25, 50, 99])
            stock = rng.randint(0, 30)
            self.products[f"SKU-{num}"] = {"name": name, "cents": cents, "stock": stock}
        skus = list(self.products)
        self.orders: dict[str, dict[str, Any]] = {}
        for num in rng.sample(range(1000, 10000), 3):
            items = {sku: rng.randint(2, 9) for sku in sorted(rng.sample(skus, 3))}
            self.orders[f"ORD-{num}"] = {"items": items, "status": "pending"}
        self.target = rng.choice(sorted(self.orders))
        items = self.orders[self.target]["items"]
        short = rng.sample(sorted(items), rng.randint(1, 2))
        for sku, qty in items.items():
            low, high = (0, qty - 1) if sku in short else (qty, qty + 20)
            self.products[sku]["stock"] = rng.randint(low, high)
        self.original = {sku: p["stock"] for sku, p in self.products.items()}
        self.short = sorted(short)
        self.total = sum(qty * self.products[sku]["cents"] for sku, qty in items.items())
        return (
            f"Order {self.target} must ship today. Store policy: before shipping, every product "
            f"in the order whose stock is below the ordered quantity is restocked by setting its "
            f"stock to exactly {_REFILL} units; other products are left alone. Ship the order, "
            "then answer with the order's total price (quantity times unit price, summed), "
            "e.g. <answer>123.45</answer>. Tools: search_products, get_product, get_order, "
            "update_stock, ship_order."
        )

    def view(self, sku: str) -> dict:
        p = self.products[sku]
        return {"sku": sku, "name": p["name"], "price": p["cents"] / 100, "stock": p["stock"]}

    def tool_search_products(self, query: str) -> list | str:
        """Find products whose name contains the query text.

        Args:
            query: Part of a product name, e.g. "mug".
        """
        q = str(query).strip().lower()
        hits = [self.view(s) for s in sorted(self.products) if q and q in self.products[s]["name"]]
        return hits or "No products match."

    def tool_get_product(self, sku: str) -> dict:
        """Get one product's name, unit price and stock.

        Args:
            sku: The product code, e.g. "SKU-123".
        """
        sku = str(sku).strip().upper()
        if sku not in self.products:
            raise ToolError(f"no product with sku {sku!r}")
        return self.view(sku)

    def tool_get_order(self, order_id: str) -> dict:
        """Get an order's status and its items (sku and quantity).

        Args:
            order_id: The order id, e.g. "ORD-1234".
        """
        oid = str(order_id).strip().upper()
        if oid not in self.orders:
            raise ToolError(f"no order with id {oid!r}")
        order = self.orders[oid]
        items = [{"sku": sku, "quantity": qty} for sku, qty in sorted(order["items"].items())]
        return {"order_id": oid, "status": order["status"], "items": items}

    def tool_update_stock(self, sku: str, quantity: int) -> dict:
        """Set a product's stock level to an exact number of units.

        Args:
            sku: The product code, e.g. "SKU-123".
            quantity: The new stock level, a whole number from 0 to 1000.
        """
        product = self.tool_get_product(sku)
        if isinstance(quantity, bool) or not isinstance(quantity, (int, float, str)):
            raise ToolError("quantity must be a whole number")
        text = str(quantity).strip()
        if not re.fullmatch(r"\d{1,4}(\.0*)?", text) or int(text.split(".")[0]) > 1000:
            raise ToolError("quantity must be a whole number from 0 to 1000")
        self.products[product["sku"]]["stock"] = int(text.split(".")[0])
        return self.view(product["sku"])

    def tool_ship_order(self, order_id: str) -> dict:
        """Ship a pending order; fails if any product lacks stock for it.

        Args:
            order_id: The order id, e.g. "ORD-1234".
        """
        order = self.tool_get_order(order_id)
        if order["status"] != "pending":
            raise ToolError(f"order {order['order_id']} was already shipped")
        for item in order["items"]:
            sku, need, have = item["sku"], item["quantity"], self.products[item["sku"]]["stock"]
            if have < need:
                raise ToolError(f"insufficient stock for {sku}: have {have}, need {need}")
        for item in order["items"]:
            self.products[item["sku"]]["stock"] -= item["quantity"]
        self.orders[order["order_id"]]["status"] = "shipped"
        return {"order_id": order["order_id"], "status": "shipped"}

    def check_answer(self, answer: str) -> float:
        items = self.orders[self.target]["items"]
        checks = [self.orders[self.target]["status"] == "shipped"]
        for sku, qty in sorted(items.items()):
            start = _REFILL if sku in self.short else self.original[sku]
            checks.append(self.products[sku]["stock"] == start - qty)
        m = re.search(r"(\d{1,9})(?:\.(\d{1,2}))?", answer.replace(",", ""))
        cents = int(m.group(1)) * 100 + int((m.group(2) or "0").ljust(2, "0")) if m else -1
        checks.append(cents == self.total)
        score = sum(checks) / len(checks)
        touched = [
            s for s, p in self.products.items() if s not in items and p["stock"] != self.original[s]
        ]
        shipped = [
            o for o, v in self.orders.items() if o != self.target and v["status"] != "pending"
        ]
        return score * 0.5 if touched or shipped else score

    def solution(self) -> list[str]:
        def call(tool: str, **arguments) -> str:
            body = {"name": tool, "arguments": arguments}
            return "<tool_call>" + json.dumps(body) + "</tool_call>"

        items = sorted(self.orders[self.target]["items"])
        steps = [call("get_order", order_id=self.target)]
        steps += [call("get_product", sku=sku) for sku in items]
        steps += [call("update_stock", sku=sku, quantity=_REFILL) for sku in self.short]
        steps.append(call("ship_order", order_id=self.target))
        return [*steps, f"<answer>{self.total // 100}.{self.total % 100:02d}</answer>"]
